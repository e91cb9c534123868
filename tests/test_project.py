"""Project checks that run with the suite: ruff, the layer contract of DESIGN.md, the loud failure of an
install without the compiled engine, and tests/sysdeps.py (what the suite needs beyond pip) against the tests."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import kafkalog

from . import sysdeps

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def _tool(name):
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).exists():
        pytest.fail(f"{name} is not installed: pip install '.[test]'")
    return exe


def test_ruff_clean():
    r = subprocess.run([_tool("ruff"), "check", "kafkalog", "tests", "bench", "setup.py"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_layers_contract():
    """Imports only point down: cli -> (broker, spark) -> client -> storage -> _engine -> config/structs -> errors."""
    pkg_root = str(Path(kafkalog.__file__).resolve().parents[1])
    r = subprocess.run([_tool("lint-imports"), "--config", str(REPO / "pyproject.toml")], cwd=REPO,
                       capture_output=True, text=True, env={"PYTHONPATH": pkg_root, "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 kept, 0 broken" in r.stdout


def test_no_two_modules_import_each_other():
    """No import circle between two modules (issue 22: broker/admin.py and api.py, spark/sink.py and source.py,
    storage/offsets.py and store.py had them): what two modules share lives in a third both import. Counted as
    import-linter's graph counts them, imports inside functions and under TYPE_CHECKING included."""
    import grimp
    g = grimp.build_graph("kafkalog", include_external_packages=False)
    pairs = sorted({tuple(sorted((a, b))) for a in g.modules for b in g.find_modules_directly_imported_by(a)
                    if a != b and a in g.find_modules_directly_imported_by(b)})
    assert not pairs, f"modules importing each other: {pairs}"


_FIRST_USES = ("from kafkalog import LogStore", "kafkalog.Log", "kafkalog.OffsetStore", "kafkalog.KafkaProducer",
               "kafkalog.Broker", "import kafkalog.storage", "kafkalog._engine")


def test_import_without_compiled_engine_fails_loudly(tmp_path):
    """No silent slow fallback: in a source tree without the built extension, ``import kafkalog`` (lazy) and the
    pytest plugin's registration work, and the first use of any name that needs the engine raises
    EngineNotBuiltError naming the fix."""
    src = Path(kafkalog.__file__).resolve().parent
    dst = tmp_path / "kafkalog"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    script = f"""
import kafkalog, kafkalog.testing.pytest_plugin
for use in {_FIRST_USES!r}:
    try:
        exec(use)
    except ImportError as e:
        print(use, "->", type(e).__name__, e)
    else:
        print(use, "-> no error")
from kafkalog import LogStore
"""
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode != 0
    assert "EngineNotBuiltError" in r.stderr and "pip install ." in r.stderr
    lines = r.stdout.splitlines()
    assert [line.partition(" -> ")[0] for line in lines] == list(_FIRST_USES), r.stdout + r.stderr
    for line in lines:
        assert " -> EngineNotBuiltError kafkalog's compiled engine is not built" in line and "pip install ." in line


def test_import_is_lazy_and_keeps_every_name():
    """``import kafkalog`` and the pytest plugin's module (imported by every pytest run of an environment with
    kafkalog installed) load no numpy, no compiled engine, no storage; every public name, ``from kafkalog import
    X``, ``kafkalog.<submodule>`` after a bare ``import kafkalog`` and ``dir(kafkalog)`` are as when they were
    imported eagerly."""
    script = """
import sys
import kafkalog, kafkalog.testing.pytest_plugin
print(sorted(m for m in sys.modules if m.partition(".")[0] in ("numpy", "kafkalog")))
names = {n: getattr(kafkalog, n) for n in kafkalog.__all__}
from kafkalog import LogStore, TopicPartition, KafkaConsumer
assert LogStore is names["LogStore"] and TopicPartition.__module__ == "kafkalog.structs"
assert KafkaConsumer.__module__ == "kafkalog.client.consumer"
import kafkalog.storage.log
assert kafkalog.storage.Log is kafkalog.Log and kafkalog._engine.batch.build_batch
assert kafkalog.testing.LocalBroker.__module__ == "kafkalog.testing.broker" and kafkalog.testing.Admin
assert kafkalog.broker.Broker is kafkalog.Broker and kafkalog.config.Config is kafkalog.Config
for bad in ("Nope", "__wrapped__"):
    try:
        getattr(kafkalog, bad)
    except AttributeError as e:
        assert repr(bad) in str(e)
    else:
        raise AssertionError(bad)
print(dir(kafkalog))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env={"PYTHONPATH": str(Path(kafkalog.__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin",
                            "PYTHONSAFEPATH": "1"})  # the kafkalog under test: built in place, or as installed
    assert r.returncode == 0, r.stderr
    loaded, listed = (eval(line) for line in r.stdout.splitlines())
    assert set(loaded) <= {"kafkalog", "kafkalog.testing", "kafkalog.testing.pytest_plugin"}, loaded
    assert set(kafkalog.__all__) - {"__version__"} <= set(listed)
    assert {"_engine", "config", "errors", "storage", "structs"} <= set(listed)


def test_packages_and_entry_points_match_the_tree():
    """pyproject.toml ships exactly the packages of the tree (every folder of kafkalog/ with an __init__.py, and
    pyspark_kafkalog), the top level holds no other package (the pytest plugin lives in kafkalog.testing), and the
    entry points name modules and functions that exist there."""
    import importlib.util
    import tomllib

    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    tree = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "kafkalog").rglob("__init__.py")}
    assert set(conf["tool"]["setuptools"]["packages"]) == tree | {"pyspark_kafkalog"}
    top = {p.parent.name for p in REPO.glob("*/__init__.py")} | {p.stem for p in REPO.glob("*.py")}
    assert top - {"tests", "build", "setup"} == {"kafkalog", "pyspark_kafkalog"}
    assert conf["project"]["entry-points"]["pytest11"] == {"kafkalog": "kafkalog.testing.pytest_plugin"}
    for value in [*conf["project"]["entry-points"]["pytest11"].values(), *conf["project"]["scripts"].values()]:
        module, _, attr = value.partition(":")
        where = REPO.joinpath(*module.split("."))
        assert module.startswith("kafkalog.") and (where.with_suffix(".py").is_file()
                                                   or (where / "__init__.py").is_file()), value
        assert importlib.util.find_spec(module) is not None, value
        assert not attr or callable(getattr(importlib.import_module(module), attr)), value


def test_typing_files_shipped():
    eng = Path(kafkalog.__file__).resolve().parent / "_engine"
    for mod in ("framing", "codecs", "batch", "accumulator", "delivery", "columns", "compaction", "index", "segment"):
        assert (eng / f"{mod}.pyi").exists(), mod
        assert (eng / f"{mod}.pxd").exists(), mod
    assert (eng.parent / "py.typed").exists()


def _commands_looked_up(text: str) -> set[str]:
    """Names a test file looks up on PATH: shutil.which of a literal, or of a loop variable over a tuple of them."""
    found = set(re.findall(r'shutil\.which\("([^"]+)"\)', text))
    for _var, names in re.findall(r"for (\w+) in \(([^)]*)\)[^\n]*\n?[^\n]*shutil\.which\(\1\)", text):
        found |= set(re.findall(r'"([^"]+)"', names))
    return found


def test_sysdeps_know_what_the_tests_use():
    """tests/sysdeps.py and the tests do not drift apart: every command a test looks up on PATH is a need whose
    used_by covers that test's file, every Debian package a test's message names is known there, every need's used_by
    exists and uses it, and .ci/run installs through the same file."""
    by_command = {c: n for n in sysdeps.NEEDS for c in n.commands}
    packages = {n.package for n in sysdeps.NEEDS}
    wrong = []
    for f in sorted(TESTS.rglob("*.py")):
        if f.name == "sysdeps.py":
            continue
        rel, text = f.relative_to(TESTS).as_posix(), f.read_text()
        for command in sorted(_commands_looked_up(text)):
            need = by_command.get(command)
            if need is None:
                wrong.append(f"{rel} looks up {command}, which sysdeps.NEEDS does not know")
            elif not sysdeps.needs_of([f], [need]):
                wrong.append(f"{rel} looks up {command}, but its need is used_by {need.used_by} only")
        hinted = re.findall(r"apt-get install ((?:[a-z0-9][a-z0-9.+-]*(?: |(?=\W)|$))+)", text)
        hinted += re.findall(r"Debian's ([a-z0-9][a-z0-9.+-]*)", text)
        wrong += [f"{rel} names the Debian package {p}, which sysdeps.NEEDS does not know"
                  for hint in hinted for p in hint.split() if p not in packages]
    for need in sysdeps.NEEDS:
        names = [f'"{c}"' for c in need.commands] or [f'"{need.library}"']
        users = []
        for u in need.used_by:
            where = TESTS / u
            if not where.exists():
                wrong.append(f"{need.what}: used_by {u}, which does not exist")
            users += sorted(where.rglob("*.py")) if where.is_dir() else [where] if where.exists() else []
        if not any(n in f.read_text() for f in users for n in names):
            wrong.append(f"{need.what}: none of {need.used_by} mentions {' or '.join(names)}")
    assert not wrong, "\n".join(wrong)
    assert "\npython3 tests/sysdeps.py\n" in (REPO / ".ci" / "run").read_text()


def _path_without(tmp: Path, *left_out: str) -> str:
    """A PATH of one folder holding apt-get, sudo and every command of sysdeps.NEEDS found on this machine but
    ``left_out``."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for c in ["apt-get", "sudo", *(c for need in sysdeps.NEEDS for c in need.commands)]:
        if c not in left_out and not (bin_dir / c).exists() and (exe := shutil.which(c)):
            (bin_dir / c).symlink_to(exe)
    return str(bin_dir)


def test_sysdeps_names_kcat_when_path_lacks_it(tmp_path):
    """The check, on a PATH without kcat (nothing is uninstalled): kcat alone is added to what is missing, and the
    message for the kcat tests names the package and the command that installs it."""
    path = _path_without(tmp_path, "kcat", "kafkacat")
    kcat = [n for n in sysdeps.NEEDS if n.package == "kcat"]
    assert [n for n in sysdeps.missing(path=path) if n not in sysdeps.missing()] == kcat
    needs = sysdeps.needs_of([TESTS / "broker" / "test_kcat.py"])
    assert kcat[0] in needs
    msg = sysdeps.ensure(needs, path=path, install=False)
    assert msg is not None and "kcat (kcat): a real librdkafka client" in msg
    assert re.search(r"apt-get install -y (\S+ )*kcat\b", msg), msg
    assert sysdeps.ensure(needs, install=False) == sysdeps.ensure(needs, path=path + ":/usr/bin", install=False)


def test_sysdeps_refuses_at_once_when_it_cannot_install():
    """As a user that is neither root nor a sudoer, on a PATH without kcat: exit 2 and one message naming kcat, why
    it could not be installed and the command, having installed nothing."""
    runuser = shutil.which("runuser")
    if os.geteuid() != 0 or runuser is None:
        pytest.skip("needs root (to run the check as nobody with runuser)")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        path = _path_without(Path(tmp), "kcat", "kafkacat")
        r = subprocess.run([runuser, "-u", "nobody", "--", "/usr/bin/python3", str(TESTS / "sysdeps.py")],
                           capture_output=True, text=True, env={"PATH": path, "HOME": "/nonexistent"}, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "installing" not in r.stderr
    assert "kcat (kcat): a real librdkafka client" in r.stderr
    assert "they could not be installed: not root and no password-less sudo" in r.stderr
    assert re.search(r"sudo apt-get install -y (\S+ )*kcat\b", r.stderr), r.stderr
