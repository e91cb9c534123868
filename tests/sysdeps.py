"""What the test suite needs from the machine beyond pip, checked before the first test runs: the Debian packages are
installed when missing, the machine's own toolchains (Java, Maven, Go, Node) are named when missing.

``pip install '.[test]' && pytest`` has to pass on a fresh Debian 12 machine as written, and pip cannot bring a C
program like kcat or libfuse3. So tests/conftest.py hands ``ensure()`` the needs of the tests it collected, after
collection: what is missing is installed with ``apt-get`` (as root, or through ``sudo -n``; ``apt-get update`` once
when the first try fails), one line saying what; when it cannot be installed the session stops at once with one
message naming the packages and the command, instead of every test that needs them failing on its own. ``.ci/run``
runs this file first (``python3 tests/sysdeps.py``): one list for CI and for pytest.

Plain module, standard library only (``.ci/run`` runs it with the system's python3 before any venv exists).
A test in tests/test_project.py keeps NEEDS and what the tests run (``shutil.which("X")``, "apt-get install X" hints)
from drifting apart.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Need:
    """One thing some tests run or load. ``commands``: any one of them on PATH will do; ``library``: a name for
    ctypes.util.find_library; ``package``: the Debian package that brings it (None: not packaged by Debian);
    ``apt``: installed by ensure() when missing (False: part of the machine, only named); ``used_by``: test paths
    under tests/ (a folder ends with /) whose tests need it."""

    package: str | None
    why: str
    used_by: tuple[str, ...]
    commands: tuple[str, ...] = ()
    library: str | None = None
    apt: bool = True
    hint: str = ""

    @property
    def what(self) -> str:
        return self.commands[0] if self.commands else f"lib{self.library}"


# .ci/lab-clients builds the Go programs and installs KafkaJS (lab.lab_client_commands) for these
_GO_JS = ("compat/lab.py", "compat/test_go_js_clients.py", "compat/test_share_groups.py")

NEEDS: tuple[Need, ...] = (
    # Debian packages installed when missing (.ci/run installs the same)
    Need("kcat", "a real librdkafka client of the broker facade", ("broker/", "compat/"),
         commands=("kcat", "kafkacat")),
    Need("fuse3", "mounts and unmounts the power-loss harness's file system", ("powerloss/",),
         commands=("fusermount3",)),
    Need("libfuse3-3", "libfuse3.so.3, which mfusepy (the power-loss harness's file system) loads", ("powerloss/",),
         library="fuse3"),
    Need("iproute2", "the Spark cluster tests' network namespaces, veth pairs and bridge", ("spark/cluster/",),
         commands=("ip",)),
    Need("util-linux", "the Spark cluster tests' mount namespaces", ("spark/cluster/",),
         commands=("unshare",)),
    Need("util-linux", "runs the refusal check of tests/test_project.py as nobody", ("test_project.py",),
         commands=("runuser",)),
    Need("openssl", "a self-signed certificate for the SASL_SSL listener", ("broker/test_sasl.py",),
         commands=("openssl",)),
    # The machine's own toolchains (the CI machine comes with Java 17, Maven, Go and Node): named when missing, never
    # installed here
    Need("openjdk-17-jdk-headless", "Java 17+ for Spark and the compatibility lab's Apache Kafka",
         ("compat/", "spark/"), commands=("java",), apt=False),
    Need("openjdk-17-jdk-headless", "compiles the compatibility lab's Java client programs",
         ("compat/",), commands=("javac",), apt=False),
    Need("maven", "fetches the lab's Apache Kafka and Spark's Kafka connector from Maven Central",
         ("compat/", "spark/cluster/"), commands=("mvn",), apt=False),
    Need(None, "builds the lab's franz-go and sarama programs", _GO_JS, commands=("go",), apt=False,
         hint="Go 1.26+, the machine's toolchain"),
    Need("nodejs", "runs the lab's KafkaJS program", _GO_JS, commands=("node",), apt=False),
    Need("npm", "installs KafkaJS for the lab", _GO_JS, commands=("npm",), apt=False),
)


def needs_of(test_files: Iterable, needs: Iterable[Need] = NEEDS) -> list[Need]:
    """The needs of the given test files (paths; those outside tests/ need nothing from here)."""
    rel = set()
    for f in test_files:
        try:
            rel.add(Path(f).resolve().relative_to(TESTS).as_posix())
        except ValueError:
            continue
    return [n for n in needs if any(r == u or (u.endswith("/") and r.startswith(u)) for u in n.used_by for r in rel)]


def present(need: Need, path: str | None = None) -> bool:
    """Whether the machine has it (commands looked up on ``path``, default $PATH)."""
    if need.commands and not any(shutil.which(c, path=path) for c in need.commands):
        return False
    return need.library is None or ctypes.util.find_library(need.library) is not None


def missing(needs: Iterable[Need] = NEEDS, path: str | None = None) -> list[Need]:
    return [n for n in needs if not present(n, path)]


def _packages(needs: Iterable[Need]) -> list[str]:
    return list(dict.fromkeys(n.package for n in needs if n.package))


def _root_prefix() -> list[str] | None:
    """[] as root, ["sudo", "-n"] when sudo works without a password, None otherwise."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=30).returncode == 0:
        return ["sudo", "-n"]
    return None


def _apt(prefix: list[str], args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run([*prefix, "apt-get", "-q", "-o", "DPkg::Lock::Timeout=600", *args], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=1800)


def _install(prefix: list[str], packages: list[str]) -> str | None:
    """apt-get install (apt-get update once first if that fails); None when done, else why not."""
    install = ["install", "-y", "--no-install-recommends", *packages]
    r = _apt(prefix, install)
    if r.returncode != 0:
        u = _apt(prefix, ["update"])
        if u.returncode != 0:
            return f"apt-get update failed ({u.returncode}): {_tail(u.stderr or u.stdout)}"
        r = _apt(prefix, install)
    if r.returncode != 0:
        return f"apt-get install failed ({r.returncode}): {_tail(r.stderr or r.stdout)}"
    return None


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _listing(needs: Iterable[Need]) -> str:
    return "".join(f"\n  {n.package or n.what} ({n.what}): {n.why}" for n in needs)


def problem(absent: list[Need], why_not: str | None = None) -> str:
    """The one message for what is still missing: the packages, what needs them, the commands that bring them."""
    apt = [n for n in absent if n.apt]
    machine = [n for n in absent if not n.apt]
    lines = []
    if apt:
        lines.append(f"the tests need Debian packages that are not installed:{_listing(apt)}")
        if why_not:
            lines.append(f"they could not be installed: {why_not}")
    if machine:
        lines.append(f"the tests need tools this machine does not have:{_listing(machine)}")
    sudo = "" if os.geteuid() == 0 else "sudo "
    pkgs = _packages(apt) + _packages(n for n in machine if n.package)
    if pkgs:
        lines.append(f"install them with: {sudo}apt-get update && {sudo}apt-get install -y {' '.join(pkgs)}")
    lines.extend(f"and {n.hint}" for n in machine if n.hint)
    return "\n".join(lines)


def ensure(needs: Iterable[Need] = NEEDS, *, path: str | None = None, install: bool = True,
           say: Callable[[str], None] = print) -> str | None:
    """Install the missing Debian packages among ``needs`` (when ``install``); None when everything is there after
    that, else the one message for what is not."""
    needs = list(needs)
    absent = missing(needs, path)
    if not absent:
        return None
    why_not = None
    to_install = _packages(n for n in absent if n.apt)
    if install and to_install:
        prefix = _root_prefix()
        if shutil.which("apt-get") is None:
            why_not = "there is no apt-get on this machine"
        elif prefix is None:
            why_not = "not root and no password-less sudo"
        else:
            say(f"installing Debian packages the tests use (apt-get): {' '.join(to_install)}")
            why_not = _install(prefix, to_install)
            absent = missing(needs, path)
            if why_not is None and any(n.apt for n in absent):
                why_not = "apt-get installed them, yet they are still not found (PATH?)"
    return problem(absent, why_not) if absent else None


def main(argv: list[str]) -> int:
    """python3 tests/sysdeps.py [--check]: every need of the suite; installs what it can unless --check."""
    msg = ensure(NEEDS, install="--check" not in argv, say=lambda line: print(line, file=sys.stderr))
    if msg:
        print(msg, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
