"""Project checks that run with the suite: ruff, the layer contract of DESIGN.md, and the loud failure of an
install without the compiled engine."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog

REPO = Path(__file__).resolve().parents[1]


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


def test_import_without_compiled_engine_fails_loudly(tmp_path):
    """No silent slow fallback: a source tree without the built extension refuses to import."""
    src = Path(kafkalog.__file__).resolve().parent
    dst = tmp_path / "kafkalog"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    r = subprocess.run([sys.executable, "-c", "import kafkalog"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode != 0
    assert "EngineNotBuiltError" in r.stderr and "pip install ." in r.stderr


def test_typing_files_shipped():
    eng = Path(kafkalog.__file__).resolve().parent / "_engine"
    for mod in ("records", "index", "segment"):
        assert (eng / f"{mod}.pyi").exists(), mod
        assert (eng / f"{mod}.pxd").exists(), mod
    assert (eng.parent / "py.typed").exists()
