"""The pytest plugin's tests: each scenario is a real inner pytest run (pytester, in a subprocess) of a small test
file that uses the plugin as a user would. ``inner(pytester, source, *args)`` writes the file and runs it.

The plugin reaches the inner run through its ``pytest11`` entry point when kafkalog is installed (CI: ``pip install
'.[test]'``); in a development venv whose install predates the entry point it is named with ``-p``.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

import kafkalog

REPO = Path(kafkalog.__file__).resolve().parents[1]
PLUGIN = "kafkalog.testing.pytest_plugin"


def _entry_point_registered() -> bool:
    return any(ep.value == PLUGIN for ep in importlib.metadata.entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    return [] if _entry_point_registered() else ["-p", PLUGIN]


@pytest.fixture
def inner(pytester, monkeypatch):
    """inner(source, *args, ini=None) -> RunResult of `pytest -p no:cacheprovider ARGS test_inner.py` in a
    subprocess, the kafkalog (and its plugin) of this run importable there."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYTHONSAFEPATH", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)

    def run(source: str, *args, ini: str | None = None, name: str = "test_inner"):
        pytester.makepyfile(**{name: source})
        if ini is not None:
            pytester.makeini(ini)
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *plugin_args(), *args, f"{name}.py",
                                             timeout=300)
    return run


@pytest.fixture
def python_exe():
    return sys.executable
