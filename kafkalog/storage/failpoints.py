"""Named failpoints: no-ops unless a test turns them on, so recovery paths can be exercised at exact steps.

Turned on in-process with ``enable(name, action)`` or, for a subprocess, with the environment variable
``KAFKALOG_FAILPOINTS="name=action,name2=action"``. Actions: ``kill`` (SIGKILL this process: a crash at exactly this
point), ``raise`` (OSError EIO, as a failing disk would), or a callable.
"""

from __future__ import annotations

import os
import signal

_active: dict[str, object] = {}


def _load_env() -> None:
    spec = os.environ.get("KAFKALOG_FAILPOINTS", "")
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition("=")
        _active[name] = action or "kill"


_load_env()


def enable(name: str, action="raise") -> None:
    _active[name] = action


def disable(name: str | None = None) -> None:
    if name is None:
        _active.clear()
    else:
        _active.pop(name, None)


def hit(name: str) -> None:
    """Called at a named step; does nothing unless that failpoint is enabled."""
    if not _active:
        return
    action = _active.get(name)
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise OSError(5, f"failpoint {name}")
    elif callable(action):
        action()
