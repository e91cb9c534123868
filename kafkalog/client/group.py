"""Consumer groups across threads and processes on one machine, without a server.

A group lives in ``<data dir>/.kafkalog-groups/g-<quoted group id>/``::

    group.lock                  flock: exclusive for membership changes, shared for commits (fencing)
    state.json                  GroupState => {generation: Int32, protocol: String, leader: String,
                                  members: {member_id: {client_id, pid, topics: [String], strategies: [String],
                                                        joined: Float64, session_timeout_s: Float64}},
                                  partitions: {topic: Int32}, assignment: {member_id: [[topic, partition]]},
                                  synced: [member_id], stable: Boolean}
    member-<member_id>.lock     one per live member, flock'ed exclusively for the member's lifetime;
                                its mtime is the member's last heartbeat

The protocol is Kafka's eager rebalance, with files for messages:

1. Any change of membership (join, leave, a member found dead, a subscription or a partition count that changed)
   is made under the exclusive ``group.lock``: the generation goes up and the new assignment is computed at once
   (every member's subscription is in ``state.json``, so no leader round trip is needed; ``leader`` names the
   member Kafka would have asked, for ``describe_group``). The new assignment is not ``stable`` yet.
2. Each member notices the new generation in its next ``poll`` (one ``stat`` of ``state.json``, and a full read
   every ``REREAD_S``, since a rename may reuse the replaced file's inode number), revokes what it owns (commits,
   calls the rebalance listener) and marks itself ``synced``.
3. When every member is synced the generation is ``stable``: members take their partitions and fetch from the
   committed offsets. A partition is never fetched by two members at once, so a member's last commits are in
   before the next owner reads them (no duplicates from the rebalance itself).

Liveness: a member's flock dies with its process, so a ``kill -9`` is seen at the next check (members check each
other every ``LIVENESS_CHECK_S``). A process that is alive but stuck stops touching its lock file (the heartbeat
thread stops when ``poll`` was not called for ``max_poll_interval_ms``) and is evicted after ``session_timeout_ms``;
the evictor removes its lock file. It finds out at its next ``poll`` (its commits fail from the eviction on) and
joins again with a new lock file, like a Kafka member that got UNKNOWN_MEMBER_ID. A join that is refused (no
assignment strategy in common with the members) leaves no file behind.

Group state holds no data: committed offsets live in ``__consumer_offsets`` (storage.OffsetStore), so a broker can
serve the same groups' offsets. ``state.json`` is replaced by rename without fsync; after a power loss nobody is a
member any more, and an unreadable file is an empty group.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from ..errors import InconsistentGroupProtocolError, InvalidGroupIdError, KafkaError, UnknownMemberIdError
from ..storage.files import FileLock
from ..structs import TopicPartition

GROUPS_DIR = ".kafkalog-groups"
LIVENESS_CHECK_S = 0.1
REREAD_S = 1.0  # state.json is read at least this often even when its stat looks unchanged (see refresh)


# ---------------------------------------------------------------------------------------------------- assignors

class RangePartitionAssignor:
    """Kafka's range assignor: per topic, members sorted by id take consecutive partition ranges, the first
    (partitions % members) one partition more."""

    name = "range"

    @staticmethod
    def assign(members: dict[str, list[str]], partitions: dict[str, int]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for topic in sorted(partitions):
            subs = sorted(m for m, topics in members.items() if topic in topics)
            if not subs:
                continue
            n = partitions[topic]
            per, extra = divmod(n, len(subs))
            for i, m in enumerate(subs):
                start = per * i + min(i, extra)
                out[m].extend(TopicPartition(topic, p) for p in range(start, start + per + (1 if i < extra else 0)))
        return out


class RoundRobinPartitionAssignor:
    """Kafka's round-robin assignor: all subscribed partitions sorted by (topic, partition) dealt to the members
    sorted by id, skipping members not subscribed to the partition's topic."""

    name = "roundrobin"

    @staticmethod
    def assign(members: dict[str, list[str]], partitions: dict[str, int]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        order = sorted(members)
        if not order:
            return out
        i = 0
        for topic in sorted(partitions):
            if not any(topic in members[m] for m in order):
                continue
            for p in range(partitions[topic]):
                while topic not in members[order[i % len(order)]]:
                    i += 1
                out[order[i % len(order)]].append(TopicPartition(topic, p))
                i += 1
        return out


ASSIGNORS = {a.name: a for a in (RangePartitionAssignor, RoundRobinPartitionAssignor)}


def assignor_name(strategy) -> str:
    """'range', 'roundrobin', one of the classes above, or kafka-python's assignor classes (same names)."""
    name = strategy if isinstance(strategy, str) else getattr(strategy, "name", None)
    if name not in ASSIGNORS:
        raise ValueError(f"partition_assignment_strategy: unknown assignor {strategy!r} "
                         f"(known: {', '.join(sorted(ASSIGNORS))})")
    return name


# ---------------------------------------------------------------------------------------------------- files

_NAME_MAX = 200  # bytes of a file name made from an id (Linux allows 255; room for a prefix and a suffix)
GROUP_ID_FILE = "group-id"  # in an ``h-`` group directory: the group id its name is a hash of


@functools.lru_cache(maxsize=65536)
def safe_name(prefix: str, text: str) -> str:
    """A file name for any Kafka id (up to 32767 bytes of any UTF-8, NUL and '/' included): ``prefix`` + the id
    percent-quoted when that is short enough, else ``h-`` + the id's SHA-256 in hex (no length limit, no byte the
    file system refuses)."""
    q = quote(text, safe="")
    if len(q) + len(prefix) <= _NAME_MAX:
        return prefix + q
    return "h-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def group_dir(store_path, group: str) -> Path:
    """The group's directory: ``g-<quoted id>``, or ``h-<sha256>`` holding a ``group-id`` file for a long id."""
    if not isinstance(group, str) or not group:
        raise InvalidGroupIdError(f"group id must be a non-empty string, got {group!r}")
    return _group_dir(str(store_path), group)


@functools.lru_cache(maxsize=65536)
def _group_dir(store_path: str, group: str) -> Path:
    # a pure function of its arguments, cached: ListGroups asks it for every group of the data dir (quoting and
    # path building were half of a 3,000-group listing)
    return Path(store_path) / GROUPS_DIR / safe_name("g-", group)


def _make_group_dir(path: Path, group: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if path.name.startswith("h-") and not (path / GROUP_ID_FILE).exists():
        tmp = path / f"{GROUP_ID_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_bytes(group.encode("utf-8", "surrogatepass"))
        os.replace(tmp, path / GROUP_ID_FILE)


def _empty_state() -> dict:
    return {"generation": 0, "protocol": None, "leader": None, "members": {}, "partitions": {}, "assignment": {},
            "synced": [], "stable": True}


def read_state(path: Path) -> dict:
    try:
        with open(path / "state.json", "rb") as f:
            state = json.loads(f.read())
        if isinstance(state, dict) and "generation" in state:
            return state
    except (OSError, ValueError):
        pass
    return _empty_state()


def _write_state(path: Path, state: dict) -> None:
    tmp = path / f"state.json.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps(state, separators=(",", ":"), sort_keys=True).encode())
    os.replace(tmp, path / "state.json")


def _member_lock(path: Path, member_id: str) -> Path:
    # a broker member id embeds the client id: any bytes, '/' and NUL included
    name = safe_name("member-", member_id)
    return path / (name + ".lock" if name.startswith("member-") else "member-" + name + ".lock")


def lock_holder_alive(path, session_timeout_s: float | None = None, now: float = 0.0) -> bool:
    """Whether a process holds the flock on ``path`` (a member's or an owner's lock file). False when the file is
    gone or its lock can be taken (the holder died: flocks die with their process); with ``session_timeout_s``,
    also False when the file's mtime (the holder's heartbeat) is older than that at ``now``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return session_timeout_s is None or now - os.fstat(fd).st_mtime <= session_timeout_s
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# This process's members (group dir -> {member id: wall time of its last heartbeat}): their liveness is read here,
# not from their files. A broker holds every wire member of a group, and each member's check probing every member's
# file was members² file opens a check period (1,000 members: a million a tenth of a second).
_LOCAL: dict[str, dict[str, float]] = {}
# group dir -> (monotonic time, suspect) of this process's last look at the members: one look a period per group
_SCANS: dict[str, tuple[float, bool]] = {}
# group dir -> (state.json's stat, monotonic read time, its parsed state): one parse a change per process, not one a
# member; and -> (a state, its longest-standing member)
_STATES: dict[str, tuple[tuple, float, dict]] = {}
_OLDEST: dict[str, tuple[dict, str]] = {}


def _oldest_member(path: Path, state: dict) -> str | None:
    memo = _OLDEST.get(str(path))
    if memo is not None and memo[0] is state:
        return memo[1]
    members = state["members"]
    oldest = min(members, key=lambda m: (members[m].get("joined", 0), m)) if members else None
    _OLDEST[str(path)] = (state, oldest)
    return oldest


def _member_alive(path: Path, member_id: str, session_timeout_s: float, now: float) -> bool:
    local = _LOCAL.get(str(path))
    beat = local.get(member_id) if local is not None else None
    if beat is not None:
        return now - beat <= session_timeout_s  # its file's lock is held by this process: only its heartbeat counts
    return lock_holder_alive(_member_lock(path, member_id), session_timeout_s, now)


def _rebalance(state: dict, partitions: dict[str, int]) -> None:
    """Next generation with a fresh assignment (exclusive group lock held)."""
    members = state["members"]
    state["generation"] += 1
    state["partitions"] = partitions
    state["synced"] = []
    state["stable"] = not members
    if not members:
        state["protocol"] = state["leader"] = None
        state["assignment"] = {}
        return
    # the first strategy of the longest-standing member that every member supports (Kafka's leader picks likewise)
    first = min(members, key=lambda m: (members[m].get("joined", 0), m))
    common = [s for s in members[first]["strategies"] if all(s in members[m]["strategies"] for m in members)]
    if not common:
        raise InconsistentGroupProtocolError(
            "members of the group have no partition assignment strategy in common: "
            + "; ".join(f"{m}: {members[m]['strategies']}" for m in sorted(members)))
    state["protocol"] = common[0]
    state["leader"] = first
    subs = {m: members[m]["topics"] for m in members}
    assignment = ASSIGNORS[common[0]].assign(subs, {t: n for t, n in partitions.items()
                                                    if any(t in s for s in subs.values())})
    state["assignment"] = {m: [[tp.topic, tp.partition] for tp in tps] for m, tps in assignment.items()}


def known_groups(store_path) -> list[str]:
    """Group ids that have a group directory (members now or before) in this data dir."""
    from urllib.parse import unquote
    try:
        names = os.listdir(Path(store_path) / GROUPS_DIR)
    except FileNotFoundError:
        return []
    out = [unquote(n[2:]) for n in names if n.startswith("g-")]
    for n in names:
        if n.startswith("h-"):
            try:
                out.append((Path(store_path) / GROUPS_DIR / n / GROUP_ID_FILE).read_bytes().decode(
                    "utf-8", "surrogatepass"))
            except (OSError, UnicodeDecodeError):
                continue  # its creator died before writing the id: nothing of it was ever committed there
    return sorted(out)


def describe_group(store, group: str) -> dict:
    """{"group_id", "state" ("Empty" | "PreparingRebalance" | "Stable"), "generation", "protocol", "protocol_type"
    (the members' kind: "consumer" unless the broker's classic coordinator ran another kind), "leader",
    "members": [{"member_id", "client_id", "pid", "topics", "assignment": [TopicPartition]}]} as seen now."""
    path = group_dir(store.path, group)
    state = read_state(path)
    now = time.time()
    members = []
    for m, info in sorted(state["members"].items()):
        if not _member_alive(path, m, info.get("session_timeout_s", 45.0), now):
            continue
        members.append({"member_id": m, "client_id": info.get("client_id"), "pid": info.get("pid"),
                        "topics": list(info.get("topics", [])),
                        "assignment": [TopicPartition(t, p) for t, p in state["assignment"].get(m, [])]})
    kind = "Empty" if not members else ("Stable" if state["stable"] else "PreparingRebalance")
    return {"group_id": group, "state": kind, "generation": state["generation"], "protocol": state["protocol"],
            "protocol_type": state.get("protocol_type", "consumer"), "leader": state["leader"], "members": members}


# ---------------------------------------------------------------------------------------------------- membership

class GroupMember:
    """One consumer's membership of a group. Used by one KafkaConsumer: its own thread calls everything except
    ``heartbeat``/``check_liveness``, which the consumer's heartbeat thread may call concurrently (both only touch
    files and take the group lock)."""

    def __init__(self, store, group: str, *, client_id: str, strategies: list[str], session_timeout_ms: int,
                 topic_partitions):
        self.store = store
        self.group = group
        self.path = group_dir(store.path, group)
        self.client_id = client_id
        self.strategies = list(strategies)
        self.session_timeout_s = session_timeout_ms / 1000.0
        self.topic_partitions = topic_partitions  # callable: topics -> {topic: partition count} (existing only)
        self.member_id = f"{client_id}-{uuid.uuid4().hex[:12]}".replace("/", "_")
        self.topics: list[str] = []
        self._lock: FileLock | None = None
        self._member_fd = -1
        self._stat = None
        self._read_at = 0.0
        self.state = _empty_state()
        self.generation = -1  # the generation this member synced to (its assignment is state["assignment"])
        self._last_check = 0.0

    # -- files --------------------------------------------------------------------------------------------------

    def _glock(self) -> FileLock:
        if self._lock is None:
            self._lock = FileLock(self.path / "group.lock")
        return self._lock

    def _locked(self, shared: bool = False):
        return _Held(self._glock(), shared)

    def refresh(self, fresh: bool = False) -> bool:
        """Re-read state.json when its stat changed, and at least every REREAD_S (a rename can give the new file
        the inode number of the one it replaced; within one tick of the file system clock and at the same size, the
        stat looks unchanged); True when it re-read. The members of one group in this process share what one of them
        read (``_STATES``; never changed in place: a member changes a ``fresh`` copy under the group lock)."""
        now = time.monotonic()
        try:
            st = os.stat(self.path / "state.json")
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        if not fresh and key == self._stat and now - self._read_at < REREAD_S:
            return False
        path = str(self.path)
        shared = None if fresh else _STATES.get(path)
        if shared is not None and key is not None and shared[0] == key and now - shared[1] < REREAD_S:
            self._stat, self._read_at = key, shared[1]
            if self.state is shared[2]:
                return False
            self.state = shared[2]
            return True
        self._stat = key
        self._read_at = now
        self.state = read_state(self.path)
        if fresh:
            self._stat = None  # a copy to change: the next refresh takes the shared one again
        elif key is not None:
            _STATES[path] = (key, now, self.state)
        return True

    def _load_locked(self) -> dict:
        self.refresh(fresh=True)
        return self.state

    def _save_locked(self, state: dict) -> None:
        _write_state(self.path, state)
        self._stat = None
        self.refresh()

    # -- membership ---------------------------------------------------------------------------------------------

    @property
    def joined(self) -> bool:
        return self._member_fd >= 0

    def join(self, topics: list[str]) -> None:
        """Register (or update the subscription) and start a new generation."""
        self.topics = sorted(set(topics))
        try:
            _make_group_dir(self.path, self.group)
        except OSError as e:
            raise KafkaError(f"group {self.group}: cannot create member files in {self.path}: {e}") from None
        with self._locked():
            self._hold_member_file_locked()
            state = self._load_locked()
            was_member = self.member_id in state["members"]
            try:
                self._evict_dead_locked(state)
                state["members"][self.member_id] = {
                    "client_id": self.client_id, "pid": os.getpid(), "topics": self.topics,
                    "strategies": self.strategies, "joined": state["members"].get(self.member_id, {}).get(
                        "joined", time.time()), "session_timeout_s": self.session_timeout_s}
                _rebalance(state, self.topic_partitions(self._all_topics(state)))
                self._save_locked(state)
            except BaseException:
                # refused (no strategy in common with the members) or failed: nothing was written; self.state was
                # changed in place, so read the file again, and a member that is not in the group holds no file
                self._stat = None
                self.refresh()
                if not was_member:
                    self._release_member_file()
                raise

    def _hold_member_file_locked(self) -> None:
        """Hold this member's lock file, with a fresh heartbeat (group lock held, so no evictor runs meanwhile).
        Created on the first join, and again when the one held is no longer at its path: an evictor removed it
        because this member stopped heartbeating, and the others judge liveness by the file at the path."""
        p = _member_lock(self.path, self.member_id)
        try:
            if self._member_fd >= 0:
                try:
                    held = os.path.samestat(os.fstat(self._member_fd), os.stat(p))
                except FileNotFoundError:
                    held = False
                if held:
                    os.utime(self._member_fd)
                    self._beat()
                    return
                os.close(self._member_fd)
                self._member_fd = -1
            fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # at most an instant: a liveness probe holds it no longer
            except OSError:
                os.close(fd)
                raise
            self._member_fd = fd
            self._beat()
        except OSError as e:
            raise KafkaError(f"group {self.group}: cannot create member files in {self.path}: {e}") from None

    def _beat(self) -> None:
        _LOCAL.setdefault(str(self.path), {})[self.member_id] = time.time()

    def _forget_local(self) -> None:
        local = _LOCAL.get(str(self.path))
        if local is not None:
            local.pop(self.member_id, None)
            if not local:
                for cache in (_LOCAL, _SCANS, _STATES, _OLDEST):
                    cache.pop(str(self.path), None)

    def _release_member_file(self) -> None:
        self._forget_local()
        if self._member_fd >= 0:
            try:
                os.unlink(_member_lock(self.path, self.member_id))
            except OSError:
                pass
            os.close(self._member_fd)
            self._member_fd = -1

    def _all_topics(self, state) -> list[str]:
        return sorted({t for info in state["members"].values() for t in info["topics"]})

    def leave(self) -> None:
        """Leave the group (a clean close): the others rebalance at once."""
        if self._member_fd < 0:
            return
        try:
            with self._locked():
                state = self._load_locked()
                if state["members"].pop(self.member_id, None) is not None:
                    state["assignment"].pop(self.member_id, None)
                    self._evict_dead_locked(state)
                    _rebalance(state, self.topic_partitions(self._all_topics(state)))
                    self._save_locked(state)
        finally:
            self._release_member_file()
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def heartbeat(self) -> None:
        if self._member_fd >= 0:
            try:
                os.utime(self._member_fd)
            except OSError:
                pass
            self._beat()

    def _evict_dead_locked(self, state: dict) -> bool:
        now = time.time()
        dead = [m for m, info in state["members"].items() if m != self.member_id
                and not _member_alive(self.path, m, info.get("session_timeout_s", self.session_timeout_s), now)]
        for m in dead:
            del state["members"][m]
            state["assignment"].pop(m, None)
            try:
                os.unlink(_member_lock(self.path, m))
            except OSError:
                pass
        return bool(dead)

    def check(self) -> None:
        """Every LIVENESS_CHECK_S: evict dead members, notice new partitions of subscribed topics; either starts a
        new generation."""
        now = time.monotonic()
        if now - self._last_check < LIVENESS_CHECK_S:
            return
        self._last_check = now
        state = self.state
        t = time.time()
        key = str(self.path)
        seen = _SCANS.get(key)
        if seen is not None and now - seen[0] < LIVENESS_CHECK_S and not seen[1]:
            suspect = False  # another member of this process looked at them all within the period
        else:
            suspect = any(m != self.member_id and not _member_alive(self.path, m,
                                                                    info.get("session_timeout_s", 45.0), t)
                          for m, info in state["members"].items())
            _SCANS[key] = (now, suspect)
        changed_parts = False
        if not suspect and state["members"].get(self.member_id) is not None \
                and _oldest_member(self.path, state) == self.member_id:
            # the longest-standing member watches partition counts (a subscribed topic created or grown)
            changed_parts = self.topic_partitions(self._all_topics(state)) != state["partitions"]
        if not suspect and not changed_parts:
            return
        with self._locked():
            state = self._load_locked()
            evicted = self._evict_dead_locked(state)
            parts = self.topic_partitions(self._all_topics(state))
            if evicted or parts != state["partitions"]:
                _rebalance(state, parts)
                self._save_locked(state)

    def sync(self, generation: int) -> None:
        """This member revoked its partitions for ``generation``: mark it synced (the generation turns stable when
        every member did)."""
        with self._locked():
            state = self._load_locked()
            if self.member_id not in state["members"]:
                raise UnknownMemberIdError(f"member {self.member_id} is no longer in group {self.group}")
            if state["generation"] != generation:
                return
            if self.member_id not in state["synced"]:
                state["synced"].append(self.member_id)
            state["stable"] = set(state["synced"]) >= set(state["members"])
            self._save_locked(state)
        self.generation = generation

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.state["assignment"].get(self.member_id, [])]

    def is_member(self) -> bool:
        return self.member_id in self.state["members"]

    def close(self) -> None:
        self._forget_local()
        if self._member_fd >= 0:
            os.close(self._member_fd)
            self._member_fd = -1
        if self._lock is not None:
            self._lock.close()
            self._lock = None


class _Held:
    __slots__ = ("lock", "shared")

    def __init__(self, lock: FileLock, shared: bool):
        self.lock = lock
        self.shared = shared

    def __enter__(self):
        try:
            self.lock.acquire(shared=self.shared, timeout=30.0, what="group lock")
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise UnknownMemberIdError(f"group directory {self.lock.path.parent} is gone") from None
            raise
        return self

    def __exit__(self, *exc):
        self.lock.release()
