"""The power-loss harness: mount plfs (plfs.py) under the test's tmp_path, run workloads on it in subprocesses, lose
power (kill the file system's process: the mount and everything not made durable go with it), mount again. The file
system's process and the workloads die with the test run however it ends (tests/children.py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _load_children():
    """tests/children.py (children that die with their parent), one copy per process (see its docstring)."""
    name = "kafkalog_test_children"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE.parent / "children.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


children = _load_children()


def _require_fuse() -> None:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this machine: the power-loss harness cannot mount (not faked)")
    if shutil.which("fusermount3") is None:
        pytest.fail("fusermount3 is missing: install Debian's fuse3 (.ci/run does)")


class PowerLossMount:
    """One plfs mount: ``mnt`` is where the workloads write, ``backing`` holds what survives a power loss."""

    def __init__(self, root: Path, env: dict, flags=()):
        self.backing = root / "durable"
        self.mnt = root / "mnt"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.flags = list(flags)
        self.proc = None
        self.log = root / "plfs.log"

    def mount(self, flags=None) -> None:
        if flags is not None:
            self.flags = list(flags)
        with open(self.log, "ab") as out:
            self.proc = children.popen([sys.executable, str(HERE / "plfs.py"), str(self.backing), str(self.mnt),
                                        *self.flags], stdout=out, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"plfs did not mount {self.mnt}: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    def lose_power(self) -> None:
        """Kill the file system's process: what it held in memory (never fsynced) is gone, as in a power loss."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None
        children.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True, timeout=20)
        deadline = time.monotonic() + 10
        while os.path.ismount(self.mnt) and time.monotonic() < deadline:
            time.sleep(0.02)

    def unmount(self) -> None:
        self.lose_power()


@pytest.fixture
def plfs(tmp_path, child_env):
    _require_fuse()
    mounts = []

    def _make(name="fs", flags=()):
        m = PowerLossMount(tmp_path / name, dict(child_env, FUSE_LIBRARY_NAME="fuse3"), flags)
        mounts.append(m)
        m.mount()
        return m

    yield _make
    for m in mounts:
        m.unmount()
