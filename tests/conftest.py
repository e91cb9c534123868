import gc
import importlib.util
import os
import sys
from pathlib import Path

import pytest

import kafkalog
from kafkalog.storage.files import CLEAN_SHUTDOWN_FILE

from .sysdeps import ensure, needs_of

# pytester (real inner pytest runs) for tests/plugin: declared here, in the top-level conftest, as pytest requires
pytest_plugins = ["pytester"]
T0 = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[1]


def pytest_collection_finish(session):
    """Before the first test: the Debian packages the collected tests use are installed when missing (sysdeps.py);
    what cannot be had stops the session here with one message, not one failure per test."""
    _groups_taken(session)
    if session.config.option.collectonly or not session.items:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    msg = ensure(needs_of({item.path for item in session.items}), say=say)
    if msg:
        pytest.exit(msg, returncode=pytest.ExitCode.USAGE_ERROR)


# Under pytest-xdist (pyproject's ``-n auto --dist loadgroup``), the tests that share a session's heavy fixtures run
# on one worker each: the compatibility lab's brokers and JVMs (tests/compat), Spark's sessions and cluster
# (tests/spark). The rest spreads over the workers.
XDIST_GROUPS = {"compat": "lab", "spark": "spark"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads xdist_group marks into the node ids
def pytest_collection_modifyitems(config, items):
    # whenever xdist is loaded, not on numprocesses: xdist's workers, where the groups are read, have none (it was
    # None there, so no test was grouped and two workers ran the lab's brokers and two Spark clusters at once)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        try:
            top = item.path.relative_to(REPO / "tests").parts[0]
        except ValueError:
            continue
        group = XDIST_GROUPS.get(top)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    """The known case of _groups_taken's, said before any worker starts (a worker's exit reaches the terminal only
    as xdist's INTERNALERROR about a crashed item)."""
    if config.getoption("dist", None) == "loadgroup" and not getattr(config, "workerinput", None):
        import importlib.metadata
        xdist = importlib.metadata.version("pytest-xdist")
        def v(s: str) -> tuple:
            return tuple(int(x) for x in s.split(".")[:2] if x.isdigit())
        if v(pytest.__version__) >= (9, 2) and v(xdist) <= (3, 8):
            raise pytest.UsageError(f"pytest {pytest.__version__} with pytest-xdist {xdist}: xdist's loadgroup "
                                    "drops the suite's xdist groups (lab, spark); pyproject's test extra pins "
                                    "pytest<9.2: pip install '.[test]'")


def _groups_taken(session) -> None:
    """An xdist worker whose grouped tests lost their group (pytest-xdist's loadgroup writes it into the node id, as
    ``id@group``; pytest 9.2 moved node ids where xdist 3.8 does not write) would spread the lab and Spark over the
    workers unseen: two broker pairs and two Spark clusters at once, a CI run of 22 min instead of 16. Stop then."""
    if not getattr(session.config, "workerinput", None) or not session.config.getoption("loadgroup", None):
        return
    lost = [it.nodeid for it in session.items if it.get_closest_marker("xdist_group") and "@" not in it.nodeid]
    if lost:
        pytest.exit(f"pytest-xdist did not take the xdist_group of {len(lost)} tests (e.g. {lost[0]}): this pytest "
                    f"({pytest.__version__}) and pytest-xdist do not work together; see pyproject's test extra",
                    returncode=pytest.ExitCode.USAGE_ERROR)


FD_COLLECT_AT = 256  # open descriptors in the test process that make the next test's end run a full collection


def pytest_runtest_teardown(item, nextitem):
    """Descriptors held by garbage in reference cycles (a client's event loop, sockets and pipes of an object a test
    dropped) wait for a full collection, which a long run seldom makes: in an xdist worker they passed 1,024 and a
    later test's ``select()`` failed with "filedescriptor out of range". A full collection whenever the process
    holds more than FD_COLLECT_AT keeps them few (a look at /proc/self/fd per test: microseconds)."""
    try:
        n = len(os.listdir("/proc/self/fd"))
    except OSError:
        return
    if n > FD_COLLECT_AT:
        gc.collect()


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def open_store(data_dir):
    """open_store(config=None, **kw) -> an exclusive LogStore on data_dir (closed at teardown)."""
    opened = []

    def _open(config=None, **kw):
        kw.setdefault("exclusive", True)
        kw.setdefault("maintenance", False)
        store = kafkalog.LogStore(data_dir, config, **kw)
        opened.append(store)
        return store

    yield _open
    for s in opened:
        s.close()


def make_unclean(path: Path) -> None:
    """After a clean close: remove the clean-shutdown marker so the next open recovers, as after a crash."""
    marker = Path(path) / CLEAN_SHUTDOWN_FILE
    if marker.exists():
        os.unlink(marker)


def subprocess_env():
    """Environment for child processes importing the same kafkalog as the tests."""
    env = dict(os.environ)
    root = str(Path(kafkalog.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONSAFEPATH"] = "1"  # never import the source tree in the cwd (it has no compiled engine in CI)
    return env


@pytest.fixture
def unclean():
    return make_unclean


@pytest.fixture
def child_env():
    return subprocess_env()


@pytest.fixture(scope="session")
def spawn():
    """``popen(args, **kw)``: subprocess.Popen whose child dies with this test process however it ends
    (tests/children.py, one copy per process under its module name)."""
    name = "kafkalog_test_children"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "children.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name].popen
