"""The reaper of one test process's brokers: ``python -S -I _reaper.py ROOT`` (run by path, imports nothing of
kafkalog: it starts in ~10 ms).

A test run killed with SIGKILL runs no cleanup of its own. This process, started by the run with its stdin a pipe
only the run holds, waits for that pipe's end (the run exited, however it went) or for the run's pid to be gone, then:
SIGTERM to every broker process the run named on stdin (``pid N`` lines; ``done N`` when one stopped), SIGKILL to
those still there after 10 s, and the removal of ROOT (the run's data dirs). A run that ends normally removes ROOT
itself and closes the pipe: the reaper then finds nothing left to do. It is in a session of its own, so a signal to
the run's process group does not take it along.
"""

import os
import select
import shutil
import signal
import sys
import time


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def main() -> None:
    root = sys.argv[1]
    parent = int(sys.argv[2])
    pids: set[int] = set()
    fd = sys.stdin.fileno()
    buf = b""
    try:
        watch = os.pidfd_open(parent)
    except (AttributeError, OSError):
        watch = None
    while True:
        if watch is None and _gone(parent):
            break
        ready, _, _ = select.select([fd] + ([watch] if watch is not None else []), [], [],
                                    None if watch is not None else 0.2)
        if watch is not None and watch in ready and fd not in ready:
            break
        if fd in ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                what, _, n = line.decode().partition(" ")
                if what == "pid":
                    pids.add(int(n))
                elif what == "done":
                    pids.discard(int(n))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    end = time.monotonic() + 10
    while pids:
        pids = {p for p in pids if not _gone(p)}
        if pids and time.monotonic() > end:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            end = time.monotonic() + 5
        time.sleep(0.02)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
