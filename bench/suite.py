#!/usr/bin/env python3
"""The default test suite's cost: wall time and peak memory of everything it starts (issue 21).

    python bench/suite.py [--beside N] [--out DIR] [-- PYTEST ARGS...]

Runs the README's test command's second half (``python -m pytest`` with the repository's settings, the venv already
installed) and, every 0.5 s, adds up the resident set sizes of every process of its process tree: pytest, the
writers and readers it forks, `kafkalog serve`, Apache Kafka's JVM, Spark's JVMs and workers, kcat, Go and Node
clients. Processes that left the tree (a child re-parented to init after its parent died) are still counted while
they live: the sampler follows every pid it has seen, by its start time. ``--beside N`` runs N more copies of the
same suite at once (each with its own temporary and lab directories' state): a busy machine, as CI can be.

Prints, per suite run: wall seconds, pytest's closing line, the peak of the tree's summed RSS with the time it was
reached and the processes that made it, and the largest single process. Benchmarks are not tests (DESIGN.md rule
10): nothing asserts on these numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time in ticks, name) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    r = raw.rindex(b")")
    name = raw[raw.index(b"(") + 1:r].decode(errors="replace")
    fields = raw[r + 2:].split()
    return int(fields[1]), int(fields[19]), name


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


class TreeSampler:
    """Follows the process trees under the given roots, and every process once seen in them."""

    def __init__(self, roots: list[int]):
        self.roots = set(roots)
        self.members: dict[tuple[int, int], str] = {}   # (pid, start) -> name
        self.peak = 0
        self.peak_at = 0.0
        self.peak_top: list[tuple[int, str, int]] = []
        self.largest: tuple[int, str, int] = (0, "", 0)
        self.t0 = time.monotonic()

    def sample(self) -> None:
        procs = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                st = _stat(int(d))
                if st:
                    procs[int(d)] = st
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        stack = [p for p in self.roots if p in procs]
        while stack:
            pid = stack.pop()
            self.members[(pid, procs[pid][1])] = procs[pid][2]
            stack.extend(children.get(pid, ()))
        total, rows = 0, []
        for (pid, start), name in list(self.members.items()):
            st = procs.get(pid)
            if st is None or st[1] != start:
                del self.members[(pid, start)]
                continue
            rss = _rss(pid)
            total += rss
            rows.append((rss, name, pid))
            if rss > self.largest[0]:
                self.largest = (rss, name, pid)
        if total > self.peak:
            self.peak, self.peak_at = total, time.monotonic() - self.t0
            self.peak_top = sorted(rows, reverse=True)[:6]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beside", type=int, default=0, help="more copies of the suite at the same time")
    ap.add_argument("--out", default=None, help="directory for each run's pytest output (default: a temp dir)")
    ap.add_argument("pytest_args", nargs="*")
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="kafkalog-suite-"))
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for i in range(1 + a.beside):
        log = open(out / f"run{i}.log", "wb")
        # --basetemp on the command line, not in PYTEST_ADDOPTS: a test that runs an inner pytest must not inherit it
        p = subprocess.Popen([sys.executable, "-m", "pytest", f"--basetemp={out / f'tmp{i}'}", *a.pytest_args],
                             cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        runs.append((p, log, time.monotonic()))
    sampler = TreeSampler([p.pid for p, _, _ in runs])
    ends: dict[int, float] = {}
    while len(ends) < len(runs):
        sampler.sample()
        for i, (p, _, t0) in enumerate(runs):
            if i not in ends and p.poll() is not None:
                ends[i] = time.monotonic() - t0
        time.sleep(0.5)
    rc = 0
    for i, (p, log, _) in enumerate(runs):
        log.close()
        lines = [ln for ln in (out / f"run{i}.log").read_text(errors="replace").splitlines() if ln.strip()]
        print(f"run {i}: exit {p.returncode}, {ends[i]:.0f} s: {lines[-1] if lines else '(no output)'}")
        rc = rc or p.returncode
    print(f"peak RSS of all the runs' processes together: {sampler.peak / 2**30:.2f} GiB, "
          f"{sampler.peak_at:.0f} s in; largest then:")
    for rss, name, pid in sampler.peak_top:
        print(f"    {rss / 2**20:8.0f} MiB  {name} ({pid})")
    rss, name, pid = sampler.largest
    print(f"largest single process: {rss / 2**20:.0f} MiB ({name}, {pid}); output in {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
