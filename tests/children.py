"""Processes the test suite starts die with it: ``popen()`` and ``run()`` instead of subprocess's, and
``die_with_parent()`` in a process a test helper forks itself.

A test run that dies (OOM-killed, SIGKILL, a CI timeout) must take every process it started with it (issue 21: a
Kafka broker and a ``kafkalog serve`` were still running 37 minutes after the pytest process that started them had
been killed, re-parented to init). Cleanup code in the dying process never runs, so the children ask the kernel
instead: between fork and exec each child calls ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (kept across exec, so a JVM or
an interpreter keeps it) and is killed the moment its parent goes, however the parent went.

Two kernel rules shape it:

- the signal fires when the parent *thread* that forked the child ends, not the parent process: ``popen()`` called
  off the main thread hands the fork to one spawner thread that lives as long as the process (a broker started from
  a worker thread that then finishes must keep running);
- a parent that dies between the fork and the prctl call is missed: the child checks that its parent is still the
  process that forked it, and kills itself if not.

Only the direct child is covered: a process that starts children of its own gives them the same (crash_writer.py's
fork server calls ``die_with_parent()`` in each forked writer). Linux only; elsewhere ``popen``/``run`` are
subprocess's own and children outlive a killed run as before.

Plain module (no pytest in it), loaded by path (``load()`` in each user) so that tests, the compatibility lab
(also imported by bench/) and the writer scripts share one copy: use ``sys.modules[MODULE_NAME]`` once loaded.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future

MODULE_NAME = "kafkalog_test_children"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

if sys.platform.startswith("linux"):
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the forked child only calls it
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _prctl.restype = ctypes.c_int
else:
    _prctl = None


def die_with_parent(parent_pid: int) -> None:
    """In a process just forked by ``parent_pid`` (before exec, or instead of it): SIGKILL when the forking thread
    ends; at once when it already has. Async-signal-safe enough for a preexec_fn: one syscall and a getppid."""
    if _prctl is None:
        return
    if _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(121)  # the kernel refused: never run a child that could outlive the run
    if os.getppid() != parent_pid:  # the parent died before the prctl: nobody will signal us
        os.kill(os.getpid(), signal.SIGKILL)


def _preexec(parent_pid: int, theirs):
    def preexec() -> None:
        die_with_parent(parent_pid)
        if theirs is not None:
            theirs()
    return preexec


class _Spawner:
    """One daemon thread that forks on behalf of other non-main threads: it ends only when the process does."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None

    def _loop(self, q: queue.SimpleQueue) -> None:
        while True:
            fn, fut = q.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:  # noqa: BLE001 (handed to the caller)
                    fut.set_exception(e)

    def call(self, fn):
        with self._lock:
            if self._queue is None:
                self._queue = queue.SimpleQueue()
                threading.Thread(target=self._loop, args=(self._queue,), name="test-children-spawner",
                                 daemon=True).start()
            q = self._queue
        fut: Future = Future()
        q.put((fn, fut))
        return fut.result()


_spawner = _Spawner()


def popen(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` whose child is SIGKILLed when this process ends (any ``preexec_fn`` given
    runs after). From a thread other than the main thread, the fork is done by the spawner thread."""
    if _prctl is None:
        return subprocess.Popen(args, **kwargs)
    kwargs["preexec_fn"] = _preexec(os.getpid(), kwargs.get("preexec_fn"))
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(args, **kwargs)
    return _spawner.call(lambda: subprocess.Popen(args, **kwargs))


def run(args, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(args, **kwargs)`` whose child is SIGKILLed when this process ends. Any thread: run() waits
    for (or kills) its child before the calling thread can end."""
    if _prctl is not None:
        kwargs["preexec_fn"] = _preexec(os.getpid(), kwargs.get("preexec_fn"))
    return subprocess.run(args, **kwargs)
