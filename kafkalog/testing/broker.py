"""A kafkalog broker for a test run: ``LocalBroker`` on 127.0.0.1 over a temporary data dir, in this process (a
thread: ``kafkalog.Broker``) or as a ``kafkalog serve`` child process, with the fault injection, restarts and users
a test needs. The pytest plugin's fixtures (``pytest_plugin.py``) are made of it; it works without pytest too::

    with LocalBroker() as broker:
        broker.bootstrap_servers          # "127.0.0.1:<port>"
        broker.fail_produce("orders", "NOT_LEADER_OR_FOLLOWER", count=2)

Nothing outlives the process that made it, however that process ends: every data dir lives under one folder per
process, and a reaper process (``_reaper.py``) started with the first broker removes that folder and stops the
broker processes once this process is gone (SIGKILL included); a ``kafkalog serve`` child also stops by itself
when this process exits (``--parent-pid``).

Thread safety: one thread drives a LocalBroker (start, stop, restart); fault injection and the helpers (produce,
consume_all, create_topic, ...) may be called from any: the helpers share one connection per broker, one request
at a time.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MODES = ("thread", "process")
# Kafka's server.properties keys tests want: topics made on first use, one partition, and a lone consumer joins its
# group at once (Kafka's default waits 3 s for more members); index files of 64 KiB, not 10 MiB (each segment
# allocates two up front, on a tmpfs scratch folder in memory: 1 MiB ones cost a partition's first use ~0.4 ms more;
# 64 KiB index 32 MiB of records at the 4 KiB interval, and a full index only rolls the segment)
DEFAULT_CONFIG = {"auto.create.topics.enable": "true", "num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
                  "log.index.size.max.bytes": "65536"}
# Where the data dirs go (TMP): "auto" picks a memory file system (/dev/shm) when it has TMPFS_MIN_FREE bytes free,
# else the temp folder; "disk" the temp folder; anything else is a folder. A test broker's data are thrown away at
# the end of the run: in memory, its fsyncs (which make a topic's creation and deletion durable) cost nothing
TMP_ENV = "KAFKALOG_TEST_TMP"
TMPFS = "/dev/shm"
TMPFS_MIN_FREE = 2 << 30


def scratch_base(choice: str | None = None) -> str:
    """The folder the run's data dirs go under, for ``choice`` (default: $KAFKALOG_TEST_TMP, else "auto")."""
    choice = choice or os.environ.get(TMP_ENV) or "auto"
    if choice == "disk":
        return tempfile.gettempdir()
    if choice != "auto":
        if not os.path.isdir(choice):
            raise ValueError(f"{TMP_ENV}/--kafkalog-tmp {choice!r}: not a folder (auto, disk or a folder)")
        return choice
    try:
        st = os.statvfs(TMPFS)
        if os.path.isdir(TMPFS) and os.access(TMPFS, os.W_OK | os.X_OK) and st.f_bavail * st.f_frsize >= TMPFS_MIN_FREE:
            return TMPFS
    except OSError:
        pass
    return tempfile.gettempdir()
SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
_READY = "kafkalog broker listening on "


class _Root:
    """This process's folder of data dirs and its reaper (started on first use; one per process, so xdist workers
    each have their own)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.path: Path | None = None
        self.keep = False
        self.tmp: str | None = None  # scratch_base's choice (the plugin's --kafkalog-tmp), read at the first broker
        self._reaper: subprocess.Popen | None = None
        self._pid = 0

    def _start(self) -> None:
        if self.path is not None and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self.path = Path(tempfile.mkdtemp(prefix=f"kafkalog-test-{os.getpid()}-", dir=scratch_base(self.tmp)))
        self._reaper = None
        if not self.keep:
            script = Path(__file__).with_name("_reaper.py")
            self._reaper = subprocess.Popen([sys.executable, "-S", "-I", str(script), str(self.path),
                                             str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
            atexit.register(self.close)

    def new_dir(self, name: str) -> Path:
        with self._lock:
            self._start()
            return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.path))

    def tell(self, line: str) -> None:
        with self._lock:
            if self._reaper is not None and self._reaper.stdin is not None:
                try:
                    self._reaper.stdin.write(line.encode() + b"\n")
                    self._reaper.stdin.flush()
                except OSError:
                    pass

    @property
    def reaper_pid(self) -> int | None:
        return self._reaper.pid if self._reaper is not None else None

    def close(self) -> None:
        """At exit: remove the folder, then let the reaper go (it finds nothing to do)."""
        with self._lock:
            if self._pid != os.getpid():
                return
            if self.path is not None and not self.keep:
                shutil.rmtree(self.path, ignore_errors=True)
            if self._reaper is not None:
                try:
                    self._reaper.stdin.close()
                except OSError:
                    pass
                try:
                    self._reaper.wait(10)
                except subprocess.TimeoutExpired:
                    self._reaper.kill()
                self._reaper = None
            self.path = None


ROOT = _Root()


def _child_env() -> dict:
    """For ``python -m kafkalog serve``: the kafkalog this process imported, never a source tree in the cwd."""
    import kafkalog
    env = dict(os.environ)
    pkg_root = str(Path(kafkalog.__file__).resolve().parents[1])
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONSAFEPATH"] = "1"
    return env


class LocalBroker:
    """One kafkalog broker on 127.0.0.1 for tests.

    ``LocalBroker(mode="thread", config=None, sasl=False, users=None, data_dir=None, name="broker")``: ``config``
    adds Kafka server keys to DEFAULT_CONFIG; ``sasl`` listens on SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256/512) with
    ``users`` ({name: password}, default SASL_USERS) made before the start, an authorizer on, ``User:admin`` a super
    user and everything allowed to a topic or group without ACLs (``add_acl`` narrows it). ``data_dir`` None: a new
    folder removed at ``stop()`` (and by the reaper if the process dies).
    """

    def __init__(self, mode: str = "thread", config: dict | None = None, *, sasl: bool = False,
                 users: dict | None = None, data_dir=None, name: str = "broker", keep_data: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.config = {**DEFAULT_CONFIG, **{k: _str(v) for k, v in (config or {}).items()}}
        self.sasl = sasl
        self.users = dict(SASL_USERS if users is None else users) if sasl else {}
        if sasl:
            self.config.setdefault("authorizer.class.name", "kafkalog")
            self.config.setdefault("super.users", "User:admin")
            self.config.setdefault("allow.everyone.if.no.acl.found", "true")
        self._own_dir = data_dir is None
        self._name = name
        self.keep_data = keep_data
        self.data_dir: Path | None = Path(data_dir) if data_dir is not None else None
        self.port = 0
        self.restarts = 0
        self._broker = None            # kafkalog.Broker (thread mode)
        self._proc: subprocess.Popen | None = None  # kafkalog serve (process mode)
        self._control = threading.Lock()
        self._stderr = None
        self._client = None  # the helpers' one connection (wire.Admin), made on first use, under _client_lock
        self._client_lock = threading.Lock()

    # -- what clients need ------------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def security_protocol(self) -> str:
        return "SASL_PLAINTEXT" if self.sasl else "PLAINTEXT"

    @property
    def pid(self) -> int:
        """The process serving (this one in thread mode)."""
        return self._proc.pid if self._proc is not None else os.getpid()

    @property
    def running(self) -> bool:
        return self._broker is not None or (self._proc is not None and self._proc.poll() is None)

    def admin(self, user: str | None = None):
        """kafkalog's own small client (``kafkalog.testing.Admin``) on this broker; on SASL as ``user`` (default
        the super user ``admin``)."""
        from .wire import Admin
        return Admin(self.bootstrap_servers, sasl=self._credentials(user or "admin") if self.sasl else None)

    def using_client(self, fn):
        """``fn(admin)`` on this broker's one shared connection (``kafkalog.testing.Admin``, as the super user on
        SASL), one caller at a time: what the helpers use, so that a test's produce, consume_all and topics cost
        round trips only, not a connection each. ``fn`` must not keep ``admin``."""
        with self._client_lock:
            if self._client is None:
                self._client = self.admin()
            return fn(self._client)

    def _drop_client(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _credentials(self, user: str) -> tuple[str, str]:
        if user not in self.users:
            raise KeyError(f"no SASL user {user!r} on this broker (users: {', '.join(self.users)})")
        return user, self.users[user]

    def client_config(self, client: str = "confluent", user: str | None = None,
                      mechanism: str = "SCRAM-SHA-256") -> dict:
        """Connection settings for ``client`` ("confluent", "kafka-python" or "aiokafka") to this broker, as that
        client spells them; on SASL, logged in as ``user`` (default ``alice``, else the first user)."""
        if client == "confluent":
            conf = {"bootstrap.servers": self.bootstrap_servers, "broker.address.family": "v4"}
            if self.sasl:
                name, pw = self._credentials(user or self._default_user())
                conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                             "sasl.username": name, "sasl.password": pw})
            return conf
        if client in ("kafka-python", "aiokafka"):
            conf = {"bootstrap_servers": self.bootstrap_servers}
            if self.sasl:
                name, pw = self._credentials(user or self._default_user())
                conf.update({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                             "sasl_plain_username": name, "sasl_plain_password": pw})
            return conf
        raise ValueError(f"client must be 'confluent', 'kafka-python' or 'aiokafka', not {client!r}")

    def _default_user(self) -> str:
        return "alice" if "alice" in self.users else next(iter(self.users))

    # -- life cycle -------------------------------------------------------------------------------------------

    def start(self) -> LocalBroker:
        if self.running:
            raise RuntimeError("broker already started")
        if self.data_dir is None:
            self.data_dir = ROOT.new_dir(self._name) / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.sasl:
            self._make_users()
        try:
            self._start_thread() if self.mode == "thread" else self._start_process()
        except BaseException:
            self.stop()
            raise
        return self

    def _listen(self) -> str:
        return f"{self.security_protocol}://127.0.0.1:{self.port}"

    def _start_thread(self) -> None:
        from ..broker import Broker
        for attempt in range(20):
            b = Broker(self.data_dir, listen=self._listen(), config=self.config)
            try:
                b.start()
                break
            except OSError:
                if not self.port or attempt == 19:  # the port of a restart, taken meanwhile: try again shortly
                    raise
                time.sleep(0.05)
        self._broker = b
        self.port = b.port

    def _start_process(self) -> None:
        args = [sys.executable, "-m", "kafkalog", "serve", "--data-dir", str(self.data_dir), "--listen",
                self._listen(), "--parent-pid", str(os.getpid()), "--control-stdin"]
        for k, v in self.config.items():
            args += ["--override", f"{k}={v}"]
        log_path = self.data_dir.parent / "serve.log"
        for attempt in range(20):
            with open(log_path, "ab") as err:
                self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                              env=_child_env(), close_fds=True, cwd=self.data_dir.parent)
            ROOT.tell(f"pid {self._proc.pid}")
            line = self._read_line(60)
            if line.startswith(_READY):
                self.port = int(line.rpartition(":")[2])
                return
            self._reap()
            tail = log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""
            if self.port and "Address already in use" in tail and attempt < 19:
                time.sleep(0.05)
                continue
            raise RuntimeError(f"kafkalog serve did not start (got {line!r}); its log ends:\n{tail}")

    def _read_line(self, timeout: float) -> str:
        out = self._proc.stdout
        if not _readable(out, timeout):
            return ""
        return out.readline().decode(errors="replace").rstrip("\n")

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.stdin.close()  # end of input: a clean stop
            except OSError:
                pass
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        ROOT.tell(f"done {proc.pid}")

    def stop(self) -> None:
        """Stop serving; the data dir goes too when the broker made it (unless ``keep_data``)."""
        self._stop_serving()
        if self._own_dir and self.data_dir is not None and not self.keep_data:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
            self.data_dir = None
            self.port = 0

    def _stop_serving(self) -> None:
        self._drop_client()
        if self._broker is not None:
            b, self._broker = self._broker, None
            b.stop()
        self._reap()

    def restart(self) -> LocalBroker:
        """Stop and start again on the same data dir and port (a clean shutdown, as a rolling restart does): every
        record acknowledged before survives, clients reconnect to the address they know. Injected faults end, in
        both modes: rules, stalls (a Produce held by one is dropped unanswered with its connection) and the
        ``injected`` count."""
        self._stop_serving()
        self.restarts += 1
        try:
            self._start_thread() if self.mode == "thread" else self._start_process()
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """Process mode: SIGKILL the broker (no clean shutdown), then start it again on the same data dir and port:
        what a crash does to clients and to unflushed records (acks=all records survive)."""
        if self.mode != "process":
            raise RuntimeError("kill() needs mode='process' (a thread cannot be killed); use restart()")
        self._proc.kill()
        self._proc.wait(10)
        self._reap()
        self.restarts += 1
        self._start_process()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"LocalBroker({self.mode}, {self.security_protocol}://{self.bootstrap_servers}, {self.data_dir})"

    # -- helpers (helpers.py) on this broker -------------------------------------------------------------------

    def produce(self, topic: str, records, partition: int | None = None) -> list[tuple[int, int]]:
        """Write records (values, (key, value) pairs or dicts with value/key/headers/timestamp/partition) and wait
        for their acknowledgement (acks=all); returns each one's (partition, offset)."""
        from .helpers import produce
        return produce(self, topic, records, partition)

    def consume_all(self, topic: str, timeout: float = 10.0, count: int | None = None,
                    partition: int | None = None) -> list:
        """The topic's records (ConsumerRecord, partition then offset order); with ``count``, first waits until it
        holds at least that many (TimeoutError after ``timeout`` s)."""
        from .helpers import consume_all
        return consume_all(self, topic, timeout=timeout, count=count, partition=partition)

    def wait_for_group(self, group: str, state: str = "Stable", members: int | None = None,
                       timeout: float = 30.0) -> dict:
        from .helpers import wait_for_group
        return wait_for_group(self, group, state=state, members=members, timeout=timeout)

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None) -> str:
        return self.using_client(lambda a: a.create_topic(name, partitions, config))

    def delete_topic(self, name: str) -> None:
        self.using_client(lambda a: a.delete_topic(name))

    # -- fault injection (kafkalog/broker/faults.py) ------------------------------------------------------------

    def fail_produce(self, topic: str, error="NOT_LEADER_OR_FOLLOWER", count: int = 1,
                     partition: int | None = None) -> None:
        """The next ``count`` produces to ``topic`` (one partition of one Produce request each) are refused with
        Kafka error ``error`` (a code, a name such as "NOT_ENOUGH_REPLICAS", or a kafkalog.errors class); nothing
        of them is appended."""
        from ..broker.faults import error_code
        self._fault("fail_produce", topic=topic, error=error_code(error), count=count, partition=partition)

    def stall(self, topic: str, partition: int = 0) -> None:
        """Produce requests naming the partition wait unanswered and fetches of it return nothing, until
        ``resume()``."""
        self._fault("stall", topic=topic, partition=partition)

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        self._fault("resume", topic=topic, partition=partition)

    def clear_faults(self) -> None:
        self._fault("clear")

    @property
    def injected(self) -> int:
        """Produces refused by ``fail_produce`` so far (since the last start)."""
        return self._fault("status")["injected"]

    def pending_faults(self) -> int:
        """Produces ``fail_produce`` has still to refuse."""
        return self._fault("status")["pending"]

    def _fault(self, op: str, **kw) -> dict:
        if self._broker is not None:
            f = self._broker.faults
            if op == "fail_produce":
                f.fail_produce(kw["topic"], kw["error"], kw["count"], kw["partition"])
            elif op == "stall":
                f.stall(kw["topic"], kw["partition"])
            elif op == "resume":
                f.resume(kw["topic"], kw["partition"])
            elif op == "clear":
                f.clear()
            return {"ok": True, "injected": f.injected, "pending": f.pending()}
        if self._proc is None:
            raise RuntimeError("the broker is not running")
        with self._control:
            self._proc.stdin.write((json.dumps({"op": op, **kw}) + "\n").encode())
            self._proc.stdin.flush()
            line = self._read_line(30)
        answer = json.loads(line) if line else {"ok": False, "error": "no answer from kafkalog serve"}
        if not answer.get("ok"):
            raise RuntimeError(f"fault injection {op}: {answer.get('error')}")
        return answer

    # -- users and ACLs (SASL) ----------------------------------------------------------------------------------

    def _make_users(self) -> None:
        from ..broker import security
        users_path, _ = security.default_paths(self.data_dir)
        store = security.CredentialStore(users_path)
        for name, pw in self.users.items():
            store.add_user(name, pw)

    def add_user(self, name: str, password: str) -> None:
        """A SCRAM user (PLAIN logs in with the same password), seen by the running broker at once."""
        self.users[name] = password
        if self.data_dir is not None:
            from ..broker import security
            security.CredentialStore(security.default_paths(self.data_dir)[0]).add_user(name, password)

    def add_acl(self, principal: str, operation: str, resource_type: str = "TOPIC", name: str = "*",
                pattern: str = "LITERAL", permission: str = "ALLOW", host: str = "*") -> None:
        """An ACL as kafka-acls adds it (``add_acl("User:alice", "READ", "TOPIC", "orders")``); once a resource
        has any ACL, only what its ACLs allow is allowed there."""
        from ..broker import security
        security.Authorizer(security.default_paths(self.data_dir)[1]).add(
            security.AclBinding(principal, host, operation, resource_type, name, pattern, permission))


def _readable(f, timeout: float) -> bool:
    """Whether ``f`` has something to read (or its end) within ``timeout`` s. poll(), not select(): select() refuses
    a descriptor numbered 1,024 or more, which a test process that holds many files and sockets reaches."""
    p = select.poll()
    p.register(f, select.POLLIN | select.POLLPRI)
    return bool(p.poll(max(0, int(timeout * 1000))))


def _str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)

