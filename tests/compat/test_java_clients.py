"""Apache Kafka's Java client (kafka-clients 4.4.0) against Apache Kafka 4.4.0 and `kafkalog serve`.

The workloads are the Java programs in tests/compat/java (compiled together once, cached by their sources' hash
under the lab's folder); each prints one JSON object per line. Every workload runs once per broker and module (its
answer cached), and each test asserts Kafka's behaviour on the broker it is given (``target``); on kafkalog it
also compares the answer with Kafka's, field by field. Nothing here is skipped or expected to fail: a check kafkalog
does not pass yet fails with the client's exact error.

- ProducerCodecs: the idempotent producer (the client's default) with each codec: offsets, timestamps, headers and
  values read back exactly.
- ConsumerOffsets: beginningOffsets/endOffsets, offsetsForTimes, assign + position + seek*, commitSync and a new
  member resuming from the commit, commit metadata.
- FetchSessions: KIP-227 incremental fetch sessions, checked on the wire by a decoding proxy (``KafkaTap``) in front
  of the broker, which also injects a wrong epoch and an unknown session id (what an evicted session looks like);
  and, on a kafkalog of its own with ``max.incremental.fetch.session.cache.slots=1``, two consumers competing for
  the one slot.
- CooperativeRebalance: two members with the cooperative-sticky assignor on 4 partitions.
- Kip848: ``group.protocol=consumer``; kafkalog must work or fail as Kafka's client fails against a broker without
  ConsumerGroupHeartbeat (the tap hides that API from Kafka's ApiVersions answer to learn the exact error).
- Transactions: a transactional producer (a commit, an abort, a commit) read back per isolation level; both brokers
  serve transactions (the broader scenarios, on a broker pair of their own: tests/compat/test_transactions.py).
- AdminOps: the AdminClient (topics, partitions, configs, records, groups, offsets, SCRAM, log dirs, ACLs; the ACL
  calls on a broker pair of their own with an authorizer and ``super.users=User:ANONYMOUS``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from .lab import (
    LAB_DIR,
    KafkaBroker,
    KafkalogServer,
    LabError,
    Target,
    assert_same,
    diff_answers,
    java_classpath,
    run_java,
)

LAB_TEST_DEADLINE_S = 150
JAVA_DIR = Path(__file__).resolve().parent / "java"
RUN = uuid.uuid4().hex[:6]           # names are the same on both brokers (so answers compare verbatim)
T0 = int(time.time() * 1000) - 120_000  # explicit record timestamps: T0 + ...
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"   # Uuid.ZERO_UUID as the Java client prints it
AUTHORIZER = {
    "kafka": {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"},
    "kafkalog": {"authorizer.class.name": "kafkalog", "super.users": "User:ANONYMOUS"},
}


# -- compiling and running the Java programs ---------------------------------------------------------------------

def compile_programs() -> Path:
    """javac every tests/compat/java/*.java together (they share Out.java) into LAB_DIR/classes/java-clients-HASH,
    once: a later session with the same sources reuses the classes."""
    sources = sorted(JAVA_DIR.glob("*.java"))
    if not sources:
        raise LabError(f"no Java sources in {JAVA_DIR}")
    h = hashlib.sha256()
    for p in sources:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    out = LAB_DIR / "classes" / f"java-clients-{h.hexdigest()[:16]}"
    if (out / ".complete").is_file():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise LabError("the Java client tests need `javac` (JDK 17+) on PATH (apt-get install openjdk-17-jdk-headless)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".java-clients.", dir=out.parent))
    try:
        r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", java_classpath(), "-d", str(tmp),
                            *map(str, sources)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise LabError(f"javac failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        (tmp / ".complete").touch()
        try:
            os.rename(tmp, out)
        except OSError:  # compiled meanwhile by another session
            if not (out / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


class Answer:
    """One run of a Java program: its JSON lines, exit status, stderr and how long it took."""

    def __init__(self, main: str, broker: str, proc: subprocess.CompletedProcess, seconds: float):
        self.main = main
        self.broker = broker
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        self.seconds = seconds
        self.lines: list[dict] = []
        self.junk: list[str] = []
        self.wire: dict = {}  # what a tap saw, when the run went through one
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                self.lines.append(json.loads(line))
            elif line.strip():
                self.junk.append(line)

    def where(self) -> str:
        """Context for failure messages: the program, broker, exit status and the end of stderr."""
        err = "\n".join(line for line in self.stderr.splitlines() if "SLF4J" not in line)[-1500:]
        return f"[{self.main} on {self.broker}: exit {self.returncode}, {self.seconds:.1f} s]\n{err}"

    def select(self, **match) -> list[dict]:
        return [d for d in self.lines if all(d.get(k) == v for k, v in match.items())]

    @property
    def ops(self) -> dict[str, dict]:
        return {d["op"]: d for d in self.lines if "op" in d}


class Workloads:
    """Runs each (program, arguments) once per broker and module; ``reference(...)`` is the same run on Kafka, for
    kafkalog's answers to be compared with."""

    def __init__(self, classes: Path, request):
        self.classes = classes
        self.request = request
        self.cache: dict = {}

    def java(self, main: str, args, broker: str, timeout: float = 120) -> Answer:
        t0 = time.monotonic()
        try:
            proc = run_java(main, [str(a) for a in args], timeout=timeout, classpath_extra=[self.classes])
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{main} on {broker} ran over {timeout} s\nstdout: {e.stdout!r:.3000}\n"
                                 f"stderr: {e.stderr!r:.3000}") from None
        ans = Answer(main, broker, proc, time.monotonic() - t0)
        print(f"[java] {main} on {broker}: exit {ans.returncode} in {ans.seconds:.1f} s")
        return ans

    def get(self, key: str, target: Target, run) -> Answer:
        """The cached answer of ``run(target) -> Answer`` for ``key`` on this broker (a failure is cached too)."""
        k = (key, target.name, target.bootstrap)
        if k not in self.cache:
            try:
                self.cache[k] = run(target)
            except BaseException as e:
                self.cache[k] = e
                raise
        got = self.cache[k]
        if isinstance(got, BaseException):
            raise AssertionError(f"the {key} workload failed earlier on {target.name}: {got}")
        return got

    def reference(self, key: str, run) -> Answer:
        kafka = self.request.getfixturevalue("kafka")
        return self.get(key, Target("kafka", kafka.bootstrap, kafka), run)


@pytest.fixture(scope="module")
def java_classes():
    try:
        return compile_programs()
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def _workload_cache(java_classes):
    return {}


@pytest.fixture
def workloads(java_classes, _workload_cache, request):
    w = Workloads(java_classes, request)
    w.cache = _workload_cache
    return w


def port_of(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def error_text(d: dict | None) -> str:
    if d is None:
        return "<no answer>"
    if d.get("ok", True) and "error" not in d:
        return "ok"
    return f"{d.get('error')}: {d.get('message')}"


# -- a Kafka wire proxy: decodes fetches, rewrites broker addresses, injects faults ---------------------------------

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS, INIT_PRODUCER_ID = 0, 1, 3, 10, 18, 22
# KIP-482: the first flexible version of each API the tap reads (from the message specs)
FLEXIBLE_FROM = {PRODUCE: 9, FETCH: 12, METADATA: 9, FIND_COORDINATOR: 3, API_VERSIONS: 3, INIT_PRODUCER_ID: 2}
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # record batch attributes & 7


class Reader:
    """A cursor over one frame reading Kafka's primitive types."""

    def __init__(self, buf, pos: int = 0):
        self.buf = buf
        self.pos = pos

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i8(self):
        return self.take(">b")

    def i16(self):
        return self.take(">h")

    def i32(self):
        return self.take(">i")

    def i64(self):
        return self.take(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"frame too short: {n} bytes wanted at {self.pos} of {len(self.buf)}")
        v = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return v

    def string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.i16()
        return None if n < 0 else self.raw(n).decode()

    def bytes_(self, flexible: bool) -> bytes | None:
        n = self.uvarint() - 1 if flexible else self.i32()
        return None if n < 0 else self.raw(n)

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.i32()

    def uuid(self) -> str:
        return str(uuid.UUID(bytes=self.raw(16)))

    def tags(self, flexible: bool) -> None:
        if flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.raw(self.uvarint())


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decode_fetch_request(version: int, r: Reader) -> dict:
    """FetchRequest v4-18 (FetchRequest.json): the session fields (and where they sit), each listed partition's
    fetch offset, the forgotten partitions."""
    flex = version >= 12
    if version <= 14:
        r.i32()  # replica id (a tagged field from v15)
    r.i32(), r.i32(), r.i32(), r.i8()  # max wait, min bytes, max bytes, isolation level
    out = {"version": version, "session_pos": None, "session_id": 0, "epoch": -1}
    if version >= 7:
        out["session_pos"] = r.pos
        out["session_id"], out["epoch"] = r.i32(), r.i32()
    parts = {}
    for _ in range(r.array_len(flex)):
        topic = r.uuid() if version >= 13 else r.string(flex)
        for _ in range(r.array_len(flex)):
            p = r.i32()
            if version >= 9:
                r.i32()  # current leader epoch
            offset = r.i64()
            if version >= 12:
                r.i32()  # last fetched epoch
            if version >= 5:
                r.i64()  # log start offset
            r.i32()  # partition max bytes
            r.tags(flex)
            parts[f"{topic}:{p}"] = offset
        r.tags(flex)
    forgotten = []
    if version >= 7:
        for _ in range(r.array_len(flex)):
            topic = r.uuid() if version >= 13 else r.string(flex)
            forgotten += [f"{topic}:{r.i32()}" for _ in range(r.array_len(flex))]
            r.tags(flex)
    out["partitions"] = parts
    out["forgotten"] = forgotten
    return out


def decode_produce_request(version: int, r: Reader) -> dict:
    """ProduceRequest v3-13 (ProduceRequest.json): acks and, per record batch (v2 format), its partition, producer
    id, base sequence, codec (attributes & 7) and record count."""
    flex = version >= 9
    r.string(flex)  # transactional id
    acks = r.i16()
    r.i32()  # timeout
    batches = []
    for _ in range(r.array_len(flex)):
        topic = r.uuid() if version >= 13 else r.string(flex)
        for _ in range(r.array_len(flex)):
            p = r.i32()
            data = r.bytes_(flex) or b""
            r.tags(flex)
            pos = 0
            while pos + 61 <= len(data):
                (length,) = struct.unpack_from(">i", data, pos + 8)
                attributes, = struct.unpack_from(">h", data, pos + 21)
                producer_id, _epoch, base_sequence, count = struct.unpack_from(">qhii", data, pos + 43)
                batches.append({"tp": f"{topic}:{p}", "producer_id": producer_id, "base_sequence": base_sequence,
                                "codec": attributes & 7, "records": count})
                pos += 12 + length
        r.tags(flex)
    return {"acks": acks, "batches": batches}


def decode_fetch_response(version: int, r: Reader) -> dict:
    """FetchResponse v4-18 after the correlation id: error, session id, per partition error / high watermark /
    last stable offset / log start offset / bytes of records."""
    flex = version >= 12
    r.tags(flex)  # response header v1
    r.i32()  # throttle time
    out = {"error": 0, "session_id": 0}
    if version >= 7:
        out["error"], out["session_id"] = r.i16(), r.i32()
    parts = {}
    for _ in range(r.array_len(flex)):
        topic = r.uuid() if version >= 13 else r.string(flex)
        for _ in range(r.array_len(flex)):
            p, err, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
            log_start = r.i64() if version >= 5 else -1
            for _ in range(max(r.array_len(flex), 0)):  # aborted transactions (nullable)
                r.i64(), r.i64()
                r.tags(flex)
            if version >= 11:
                r.i32()  # preferred read replica
            records = r.bytes_(flex)
            r.tags(flex)
            parts[f"{topic}:{p}"] = {"error": err, "hw": hw, "lso": lso, "log_start": log_start,
                                     "records": len(records or b"")}
        r.tags(flex)
    out["partitions"] = parts
    return out


def rewrite_ports(api_key: int, version: int, frame: bytearray, old: int, new: int) -> None:
    """Point every broker address of a Metadata or FindCoordinator answer with port ``old`` at ``new``, in place (a
    port is an INT32), so that every connection the client opens goes through the proxy."""
    flex = version >= FLEXIBLE_FROM[api_key]
    r = Reader(frame, 4)
    r.tags(flex)

    def port_at(pos: int) -> None:
        if struct.unpack_from(">i", frame, pos)[0] == old:
            struct.pack_into(">i", frame, pos, new)

    if api_key == METADATA:
        if version >= 3:
            r.i32()  # throttle time
        for _ in range(r.array_len(flex)):
            r.i32()
            r.string(flex)
            port_at(r.pos)
            r.i32()
            if version >= 1:
                r.string(flex)  # rack
            r.tags(flex)
    elif version < 4:  # FindCoordinator v0-3: one coordinator
        if version >= 1:
            r.i32()
        r.i16()
        if version >= 1:
            r.string(flex)
        r.i32()
        r.string(flex)
        port_at(r.pos)
    else:  # v4+: a coordinator per key
        r.i32()
        for _ in range(r.array_len(flex)):
            r.string(flex)
            r.i32()
            r.string(flex)
            port_at(r.pos)
            r.i32()
            r.i16()
            r.string(flex)
            r.tags(flex)


def hide_api_keys(version: int, frame: bytearray, hidden: set[int]) -> bytearray:
    """An ApiVersions answer without the ``hidden`` API keys (its header is always v0: just the correlation id)."""
    flex = version >= FLEXIBLE_FROM[API_VERSIONS]
    r = Reader(frame, 4)
    r.i16()  # error code
    head = bytes(frame[:r.pos])
    kept = []
    for _ in range(r.array_len(flex)):
        start = r.pos
        key = r.i16()
        r.i16(), r.i16()
        r.tags(flex)
        if key not in hidden:
            kept.append(bytes(frame[start:r.pos]))
    count = uvarint(len(kept) + 1) if flex else struct.pack(">i", len(kept))
    return bytearray(head + count + b"".join(kept) + bytes(frame[r.pos:]))


class KafkaTap:
    """A loopback proxy in front of one broker. Every frame is passed on; broker addresses in Metadata and
    FindCoordinator answers are rewritten to the proxy; each Fetch request is decoded with its answer into
    ``fetches`` (in order), each Produce request's acks and record batch headers into ``produces``, every
    request's (client id, API key, version) into ``requests``. ``mutate(fetch) -> (session_id, epoch) | None`` may
    replace a fetch's session fields on the way to the broker (fault injection); ``hide_apis`` are removed from
    ApiVersions answers."""

    def __init__(self, target_port: int, mutate=None, hide_apis=()):
        self.target = target_port
        self.mutate = mutate
        self.hide_apis = set(hide_apis)
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.fetches: list[dict] = []
        self.requests: list[tuple[str | None, int, int]] = []  # (client id, api key, version), every request
        self.produces: list[dict] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.conns = 0
        self._spawn(self._accept)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def close(self) -> None:
        self.srv.close()
        with self.lock:
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self.threads:
            t.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.srv.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
                upstream.settimeout(None)
            except OSError as e:
                self.errors.append(f"cannot reach the broker: {e}")
                client.close()
                continue
            with self.lock:
                self.conns += 1
                conn = self.conns
                self.socks += [client, upstream]
            pending: dict[int, tuple] = {}
            self._spawn(self._pipe, client, upstream, True, conn, pending)
            self._spawn(self._pipe, upstream, client, False, conn, pending)

    def _pipe(self, src, dst, up: bool, conn: int, pending: dict) -> None:
        buf = bytearray()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + size:
                        break
                    frame = bytearray(buf[4:4 + size])
                    del buf[:4 + size]
                    try:
                        frame = (self._request if up else self._response)(frame, conn, pending)
                    except Exception as e:  # noqa: BLE001 - a frame the tap cannot read fails the test
                        self.errors.append(f"{'request' if up else 'response'} on connection {conn}: {e!r}")
                    dst.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _request(self, frame: bytearray, conn: int, pending: dict) -> bytearray:
        r = Reader(frame)
        api_key, version, corr = r.i16(), r.i16(), r.i32()
        client_id = r.string(False)  # a request header's client id is never compact
        if version >= FLEXIBLE_FROM.get(api_key, 1 << 16):
            r.tags(True)
        record = None
        with self.lock:
            self.requests.append((client_id, api_key, version))
        if api_key == PRODUCE:
            produce = decode_produce_request(version, r)
            produce["client_id"] = client_id
            with self.lock:
                self.produces.append(produce)
        elif api_key == FETCH:
            record = decode_fetch_request(version, r)
            record.update(conn=conn, client_id=client_id, mutated=None, response=None, t=time.monotonic())
            if self.mutate is not None and record["session_pos"] is not None:
                change = self.mutate(record)
                if change is not None:
                    struct.pack_into(">ii", frame, record["session_pos"], *change)
                    record["mutated"] = change
            with self.lock:
                self.fetches.append(record)
        pending[corr] = (api_key, version, record)
        return frame

    def _response(self, frame: bytearray, conn: int, pending: dict) -> bytearray:
        (corr,) = struct.unpack_from(">i", frame)
        api_key, version, record = pending.pop(corr, (None, None, None))
        if api_key in (METADATA, FIND_COORDINATOR):
            rewrite_ports(api_key, version, frame, self.target, self.port)
        elif api_key == API_VERSIONS and self.hide_apis:
            frame = hide_api_keys(version, frame, self.hide_apis)
        elif api_key == FETCH:
            answer = decode_fetch_response(version, Reader(frame, 4))
            answer["t"] = time.monotonic()
            with self.lock:
                record["response"] = answer
        return frame

    def client_fetches(self, client_id: str) -> list[dict]:
        with self.lock:
            return [f for f in self.fetches if f["client_id"] == client_id]


# -- the idempotent producer with every codec --------------------------------------------------------------------

def run_codecs(workloads: Workloads, target: Target) -> Answer:
    """ProducerCodecs through a tap, which records what the producers put on the wire (``ans.wire``)."""
    with KafkaTap(port_of(target.bootstrap)) as tap:
        ans = workloads.java("ProducerCodecs", [tap.bootstrap, f"jc-{RUN}-codecs", ",".join(CODECS), T0],
                             target.name, timeout=120)
    assert not tap.errors, f"the tap could not read the traffic: {tap.errors[:5]}"
    ans.wire = {"requests": tap.requests, "produces": tap.produces}
    return ans


def check_idempotent_batches(wire: dict, codec: str) -> list[str]:
    """What the producer of ``codec`` sent: InitProducerId, then acks=all batches with the codec's compression,
    its producer id, and per partition sequences 0, n1, n1 + n2, ... (KIP-98's idempotence); some batch of several
    records (linger.ms collected them)."""
    client = f"codecs-{codec}"
    problems = []
    if not any(c == client and k == INIT_PRODUCER_ID for c, k, _v in wire["requests"]):
        problems.append(f"{client} sent no InitProducerId")
    produces = [p for p in wire["produces"] if p["client_id"] == client]
    batches = [b for p in produces for b in p["batches"]]
    if not batches:
        return [*problems, f"{client}: no record batch seen"]
    if {p["acks"] for p in produces} != {-1}:
        problems.append(f"{client}: acks {sorted({p['acks'] for p in produces})}, the idempotent producer's is -1")
    if {b["codec"] for b in batches} != {CODEC_IDS[codec]}:
        problems.append(f"{client}: batch codecs {sorted({b['codec'] for b in batches})}, not {CODEC_IDS[codec]}")
    pids = {b["producer_id"] for b in batches}
    if len(pids) != 1 or min(pids) < 0:
        problems.append(f"{client}: producer ids {sorted(pids)}")
    next_seq: dict[str, int] = {}
    sent: set = set()
    for b in batches:
        key = (b["tp"], b["base_sequence"], b["records"])
        if key in sent:
            continue  # a retry of a batch already sent (a reply late on a loaded machine): what idempotence is for
        sent.add(key)
        if b["base_sequence"] != next_seq.get(b["tp"], 0):
            problems.append(f"{client}: {b['tp']} batch at sequence {b['base_sequence']}, "
                            f"expected {next_seq.get(b['tp'], 0)}")
        next_seq[b["tp"]] = b["base_sequence"] + b["records"]
    if sum(next_seq.values()) != 66 or max(b["records"] for b in batches) < 2:
        problems.append(f"{client}: {sum(next_seq.values())} records in {len(batches)} batches")
    return problems


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_producer_codec(workloads, target, codec):
    ans = workloads.get("codecs", target, lambda t: run_codecs(workloads, t))
    errors = ans.select(codec=codec, ok=False)
    assert not errors, f"{codec}: {[error_text(e) for e in errors]}\n{ans.where()}"
    sent = ans.select(event="sent", codec=codec)
    read = ans.select(event="read", codec=codec)
    assert len(sent) == 66, f"{codec}: {len(sent)} records acknowledged of 66\n{ans.where()}"
    for p in (0, 1):
        in_p = [s for s in sorted(sent, key=lambda s: s["i"]) if s["partition"] == p]
        assert [s["offset"] for s in in_p] == list(range(33)), f"{codec}: partition {p}'s offsets in send order"
    for s in sent:
        if s["explicit_timestamp"] is not None:
            assert s["timestamp"] == s["explicit_timestamp"], f"{codec}: record {s['i']}'s CreateTime timestamp"
    expected = {(s["partition"], s["offset"]): {k: s[k] for k in ("timestamp", "key", "value_len", "value_sha",
                                                                   "headers")} for s in sent}
    got = {(r["partition"], r["offset"]): {k: r[k] for k in ("timestamp", "key", "value_len", "value_sha",
                                                              "headers")} for r in read}
    assert len(read) == len(got), f"{codec}: a record was read twice"
    assert_same(expected, got, what=f"{codec}: records read back vs acknowledged on {target.name}")
    assert {r["timestamp_type"] for r in read} == {"CreateTime"}
    offsets = ans.select(event="offsets", codec=codec)
    assert offsets and offsets[0]["beginning"] == [0, 0] and offsets[0]["end"] == [33, 33], offsets
    problems = check_idempotent_batches(ans.wire, codec)
    assert not problems, "\n".join(problems)
    if target.name == "kafkalog":
        ref = workloads.reference("codecs", lambda t: run_codecs(workloads, t))

        def comparable(a: Answer) -> list:
            # producer-assigned timestamps are the send time: equal to what is read back (above), not across runs
            return [{k: v for k, v in d.items() if not (k == "timestamp" and d.get("explicit_timestamp") is None)}
                    for d in a.select(event="sent", codec=codec)]
        assert_same(comparable(ref), comparable(ans), what=f"{codec}: acknowledged records")


# -- consumer positions and group offsets ------------------------------------------------------------------------

def run_offsets(workloads: Workloads, target: Target) -> Answer:
    return workloads.java("ConsumerOffsets", [target.bootstrap, f"jc-{RUN}-offsets", f"jc-{RUN}-offsets-g", T0],
                          target.name, timeout=120)


def offsets_answer(workloads, target=None) -> Answer:
    """The ConsumerOffsets answer on ``target`` (None: Kafka's, the reference), which must have no failed call."""
    run = lambda t: run_offsets(workloads, t)  # noqa: E731
    ans = workloads.get("offsets", target, run) if target is not None else workloads.reference("offsets", run)
    failed = [d for d in ans.lines if d.get("ok") is False]
    assert not failed and ans.returncode == 0, f"{[error_text(d) for d in failed]}\n{ans.where()}"
    return ans


def step(ans: Answer, name: str, **match) -> dict:
    got = ans.select(step=name, **match)
    assert len(got) == 1, f"step {name} {match}: {len(got)} answers\n{ans.where()}"
    return got[0]


def expected_for_time(q: int) -> list:
    """offsetsForTimes over the layout ConsumerOffsets writes: partition 0 at T0 + 1000 i, partition 1 at
    T0 + 1000 i + 500 (i < 20): the first record with a timestamp >= q, as [offset, timestamp], or None."""
    out = []
    for shift in (0, 500):
        hits = [i for i in range(20) if 1000 * i + shift >= q]
        out.append([hits[0], T0 + 1000 * hits[0] + shift] if hits else None)
    return out


def test_beginning_and_end_offsets(workloads, target):
    ans = offsets_answer(workloads, target)
    d = step(ans, "offsets")
    assert (d["beginning"], d["end"]) == ([0, 0], [20, 20]), d


def test_offsets_for_times(workloads, target):
    ans = offsets_answer(workloads, target)
    rows = ans.select(step="for_times")
    assert len(rows) == 10, rows
    got = {d["query"]: d["result"] for d in rows}
    assert_same({q: expected_for_time(q) for q in got}, got, what=f"offsetsForTimes on {target.name}")
    if target.name == "kafkalog":
        assert_same(offsets_answer(workloads).select(step="for_times"), rows, what="offsetsForTimes")


def test_assign_position_and_seek(workloads, target):
    ans = offsets_answer(workloads, target)
    assert (step(ans, "position", what="reset_latest")["p0"], step(ans, "position", what="reset_latest")["p1"]) \
        == (20, 20)
    d = step(ans, "position", what="reset_earliest")
    assert (d["p0"], d["p1"]) == (0, 0)
    d = step(ans, "position", what="seek_7")
    assert d["p0"] == 7 and d["first"] == [7, T0 + 7000], d
    assert step(ans, "position", what="seek_to_end")["p0"] == 20
    d = step(ans, "position", what="seek_to_beginning")
    assert d["p0"] == 0 and d["first"] == [0, T0], d
    d = step(ans, "position", what="seek_for_time")  # offsetsForTimes(T0 + 12345) on partition 1, then seek
    assert d["p1"] == 12 and d["first"] == [12, T0 + 12_500], d
    if target.name == "kafkalog":
        assert_same(offsets_answer(workloads).select(step="position"), ans.select(step="position"), what="positions")


def test_commit_then_new_member_resumes(workloads, target):
    ans = offsets_answer(workloads, target)
    a, b, c = step(ans, "group_a"), step(ans, "group_b"), step(ans, "group_c")
    read_a = [tuple(x) for x in a["read"]]
    read_b = [tuple(x) for x in b["read"]]
    assert len(read_a) >= 10 and a["committed"] == a["positions"], a
    for p in (0, 1):
        # what A committed is exactly where it stopped; B starts there and reads the rest, nothing twice
        a_p = [o for q, o in read_a if q == p]
        b_p = [o for q, o in read_b if q == p]
        assert a_p == list(range(a["committed"][p])), (p, a)
        assert b_p == list(range(a["committed"][p], 20)), (p, a["committed"], b_p)
    assert sorted(read_a + read_b) == [(p, o) for p in (0, 1) for o in range(20)]
    meta = step(ans, "commit_meta")
    assert (meta["p0"], meta["p0_metadata"], meta["p1"]) == (20, "done-by-b", 20), meta
    assert c["read"] == [] and c["positions"] == [20, 20], c
    if target.name == "kafkalog":
        ref = offsets_answer(workloads)

        def comparable(x: Answer) -> dict:  # how many records a poll returns is the client's business
            return {"a_assignment": step(x, "group_a")["assignment"], "b_assignment": step(x, "group_b")["assignment"],
                    "commit_meta": step(x, "commit_meta"), "c": step(x, "group_c")}
        assert_same(comparable(ref), comparable(ans), what="group members and commits")


# -- KIP-227 incremental fetch sessions, on the wire -------------------------------------------------------------

SESSION_PARTITIONS = 4
SESSION_RECORDS = 16
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71


class SessionFaults:
    """Fault injection for one consumer's fetches: a wrong epoch in its 4th incremental fetch (an idle one), then an
    unknown session id (what an evicted session looks like) in its first incremental fetch that lists a partition,
    i.e. while records flow, at least 8 incremental fetches in."""

    def __init__(self, client_id: str):
        self.client_id = client_id
        self.incremental = 0
        self.injected: list[str] = []

    def __call__(self, f: dict):
        if f["client_id"] != self.client_id or f["session_id"] == 0 or f["epoch"] <= 0:
            return None
        self.incremental += 1
        if not self.injected and self.incremental >= 4:
            self.injected.append("epoch")
            return f["session_id"], f["epoch"] + 1000
        if self.injected == ["epoch"] and self.incremental >= 8 and f["partitions"]:
            self.injected.append("session")
            return ((f["session_id"] + 0x2A2A2A) & 0x7FFFFFFF) or 1, f["epoch"]
        return None


def check_session_protocol(fetches: list[dict], partitions: int) -> tuple[dict, list[str]]:
    """Walk one consumer's fetches with the broker's answers, as KIP-227 and the Java client's FetchSessionHandler
    define them: (summary, problems).

    - the client sends (0, 0) first, (S, 1) after a full answer that created session S, (S, e + 1) after an
      incremental answer, (S, 0) (close and re-create) after INVALID_FETCH_SESSION_EPOCH, (0, 0) after
      FETCH_SESSION_ID_NOT_FOUND or an answer without a session;
    - a full fetch lists every partition, its answer every one;
    - an incremental fetch lists only partitions whose fetch offset changed, and never all of them while most are idle;
    - an incremental answer lists only partitions with records, an error, or a changed high watermark / last stable
      offset / log start offset;
    - a fetch whose session fields the tap falsified is answered with 71 (epoch) or 70 (session id) and nothing else.
    """
    problems: list[str] = []
    summary = {"fetches": len(fetches), "sessions_created": 0, "incremental": 0, "idle_incremental": 0,
               "incremental_listing_partitions": 0, "incremental_answers_with_records": 0, "faults": [],
               "full_answers_with_records": 0, "sessionless_full": 0, "created_at": [], "closed_at": None}
    expect = (0, 0)
    offsets: dict[str, int] = {}
    state: dict[str, tuple] = {}
    for i, f in enumerate(fetches):
        sent = (f["session_id"], f["epoch"])
        resp = f["response"]
        last = i == len(fetches) - 1
        if sent[1] == -1 and last:  # the consumer closing its session
            summary["closed_at"] = f["t"]
            break
        where = f"fetch #{i} {sent}"
        if sent != expect:
            problems.append(f"{where}: the client should have sent {expect} after the previous answer")
        if resp is None:
            if not last:
                problems.append(f"{where}: no answer")
            break
        full = sent[1] == 0 or sent[0] == 0
        if full:
            if len(f["partitions"]) != partitions:
                problems.append(f"{where}: a full fetch lists {len(f['partitions'])} of {partitions} partitions")
            offsets = dict(f["partitions"])
            state = {}
        else:
            summary["incremental"] += 1
            for tp, off in f["partitions"].items():
                if offsets.get(tp) == off:
                    problems.append(f"{where}: incremental fetch re-lists {tp} at an unchanged offset {off}")
                offsets[tp] = off
            for tp in f["forgotten"]:
                offsets.pop(tp, None)
            if f["partitions"]:
                summary["incremental_listing_partitions"] += 1
            else:
                summary["idle_incremental"] += 1
            if len(f["partitions"]) == partitions:
                problems.append(f"{where}: incremental fetch lists every partition")
        if f["mutated"] is not None:
            kind = "epoch" if f["mutated"][0] == sent[0] else "session"
            want = INVALID_FETCH_SESSION_EPOCH if kind == "epoch" else FETCH_SESSION_ID_NOT_FOUND
            summary["faults"].append({"kind": kind, "error": resp["error"], "partitions": len(resp["partitions"])})
            if resp["error"] != want or resp["partitions"]:
                problems.append(f"{where} sent as {f['mutated']}: answered error {resp['error']} with "
                                f"{len(resp['partitions'])} partitions, Kafka answers {want} and none")
        if resp["error"] != 0:
            if f["mutated"] is None:
                problems.append(f"{where}: unexpected top-level error {resp['error']}")
            expect = (0, 0) if resp["error"] == FETCH_SESSION_ID_NOT_FOUND else (sent[0], 0)
            continue
        if full:
            if set(resp["partitions"]) != set(f["partitions"]):
                problems.append(f"{where}: a full answer lists {sorted(resp['partitions'])}, "
                                f"the fetch {sorted(f['partitions'])}")
            if any(p["records"] for p in resp["partitions"].values()):
                summary["full_answers_with_records"] += 1
            if resp["session_id"] != 0:
                summary["sessions_created"] += 1
                summary["created_at"].append(resp["t"])  # when the answer came (a fetch may wait for records)
                expect = (resp["session_id"], 1)
            else:
                summary["sessionless_full"] += 1
                expect = (0, 0)
        else:
            if resp["session_id"] != sent[0]:
                problems.append(f"{where}: incremental answer carries session {resp['session_id']}")
            for tp, p in resp["partitions"].items():
                now = (p["hw"], p["lso"], p["log_start"])
                if not p["records"] and not p["error"] and state.get(tp) == now:
                    problems.append(f"{where}: incremental answer lists {tp} with nothing new ({p})")
            if any(p["records"] for p in resp["partitions"].values()):
                summary["incremental_answers_with_records"] += 1
            expect = (sent[0], sent[1] + 1) if resp["session_id"] else (0, 0)
        for tp, p in resp["partitions"].items():
            state[tp] = (p["hw"], p["lso"], p["log_start"])
    return summary, problems


def consumed_records(ans: Answer, consumer: int) -> list[tuple]:
    return [(d["partition"], d["offset"], d["value"]) for d in ans.select(event="record", consumer=consumer)]


def expected_session_records() -> list[tuple]:
    """What FetchSessions produces: record i to partition 0, every 4th to the last partition."""
    out, next_offset = [], {}
    for i in range(SESSION_RECORDS):
        p = SESSION_PARTITIONS - 1 if i % 4 == 3 else 0
        out.append((p, next_offset.get(p, 0), f"r{i}"))
        next_offset[p] = next_offset.get(p, 0) + 1
    return sorted(out)


def run_sessions(workloads: Workloads, target: Target) -> tuple[Answer, dict]:
    faults = SessionFaults("sessions-0")
    with KafkaTap(port_of(target.bootstrap), mutate=faults) as tap:
        ans = workloads.java("FetchSessions", [tap.bootstrap, f"jc-{RUN}-sessions", SESSION_PARTITIONS,
                                               SESSION_RECORDS, 1], target.name, timeout=90)
    assert not tap.errors, f"the tap could not read the traffic: {tap.errors[:5]}"
    fetches = tap.client_fetches("sessions-0")
    conns = {f["conn"] for f in fetches}
    assert len(conns) == 1, f"the consumer fetched over {len(conns)} connections"
    summary, problems = check_session_protocol(fetches, SESSION_PARTITIONS)
    return ans, {"summary": summary, "problems": problems, "injected": faults.injected,
                 "versions": sorted({f["version"] for f in fetches})}


def test_incremental_fetch_sessions_on_the_wire(workloads, target):
    ans, wire = workloads.get("sessions", target, lambda t: run_sessions(workloads, t))
    failed = [d for d in ans.lines if d.get("ok") is False]
    assert not failed and ans.returncode == 0, f"{[error_text(d) for d in failed]}\n{ans.where()}"
    got = consumed_records(ans, 0)
    assert sorted(got) == expected_session_records() and len(got) == SESSION_RECORDS, \
        f"the consumer read {got}\n{ans.where()}"
    s = wire["summary"]
    print(f"{target.name}: Fetch v{wire['versions']}, {s}")
    assert not wire["problems"], "\n".join([f"fetch session protocol on {target.name} (Fetch v{wire['versions']}):",
                                            *wire["problems"][:30]])
    assert wire["injected"] == ["epoch", "session"], f"faults injected: {wire['injected']} ({s})"
    assert [(x["kind"], x["error"]) for x in s["faults"]] == [("epoch", INVALID_FETCH_SESSION_EPOCH),
                                                               ("session", FETCH_SESSION_ID_NOT_FOUND)], s
    assert s["sessions_created"] == 3, f"one session at the start and one after each fault: {s}"
    assert s["idle_incremental"] >= 3 and s["incremental_listing_partitions"] >= 3, s
    assert s["incremental_answers_with_records"] >= 3, s


@pytest.mark.slow  # the default suite's 20-minute budget on 2 cores; run with -m slow
def test_fetch_session_cache_of_one_slot(workloads, tmp_path_factory):
    """kafkalog only (Kafka splits its slots over 8 shards, so 1 slot there means no session at all): two consumers
    compete for a cache of one session; the loser fetches without a session, and both read everything."""
    workdir = tmp_path_factory.mktemp("kafkalog-one-slot")
    server = KafkalogServer({"max.incremental.fetch.session.cache.slots": 1})
    try:
        try:
            server.start(workdir)
        except LabError as e:
            pytest.fail(f"kafkalog with one fetch session slot did not start: {e}", pytrace=False)
        with KafkaTap(server.port) as tap:
            ans = workloads.java("FetchSessions", [tap.bootstrap, f"jc-{RUN}-one-slot", SESSION_PARTITIONS,
                                                   SESSION_RECORDS, 2], "kafkalog (1 slot)", timeout=90)
        assert not tap.errors, tap.errors[:5]
        assert ans.returncode == 0, ans.where()
        summaries = {}
        for c in (0, 1):
            got = consumed_records(ans, c)
            assert sorted(got) == expected_session_records() and len(got) == SESSION_RECORDS, \
                f"consumer {c} read {got}\n{ans.where()}"
            summary, problems = check_session_protocol(tap.client_fetches(f"sessions-{c}"), SESSION_PARTITIONS)
            assert not problems, "\n".join([f"consumer {c}:", *problems[:30]])
            summaries[c] = summary
        # the first to ask gets the slot and keeps it until it closes its session at the end; the other fetches
        # without a session (full fetches answered with session id 0) meanwhile, and may take the slot after that
        winner = min((0, 1), key=lambda c: summaries[c]["created_at"][0] if summaries[c]["created_at"] else 1e18)
        w, lose = summaries[winner], summaries[1 - winner]
        assert w["created_at"] and w["incremental"] >= 3, summaries
        until = w["closed_at"] if w["closed_at"] is not None else float("inf")
        early = [t for t in lose["created_at"] if t < until]
        assert not early, f"both consumers held a session of the one slot at once: {summaries}"
        assert lose["sessionless_full"] >= 5 and lose["full_answers_with_records"] >= 1, summaries
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# -- cooperative-sticky rebalance --------------------------------------------------------------------------------

def run_cooperative(workloads: Workloads, target: Target) -> Answer:
    return workloads.java("CooperativeRebalance", [target.bootstrap, f"jc-{RUN}-coop", f"jc-{RUN}-coop-g"],
                          target.name, timeout=150)


def test_cooperative_sticky_rebalance(workloads, target):
    ans = workloads.get("cooperative", target, lambda t: run_cooperative(workloads, t))
    bad = [d for d in ans.lines if d.get("ok") is False or d.get("event") in ("timeout", "lost")]
    assert not bad and ans.returncode == 0, f"{bad}\n{ans.where()}"
    topic = f"jc-{RUN}-coop"
    everything = [f"{topic}-{p}" for p in range(4)]
    events = {}
    for m in ("a", "b"):
        evs = [d for d in ans.lines if d.get("member") == m and d.get("event") != "record"]
        finals = [i for i, d in enumerate(evs) if d["event"] == "final"]
        assert len(finals) == 1, f"member {m}: {evs}"
        events[m] = evs[:finals[0] + 1]  # what happened while it was in the group (its close revokes the rest)
    a, b = events["a"], events["b"]
    assert a[0]["event"] == "assigned" and a[0]["partitions"] == everything, f"a joined alone: {a[0]}"
    a_revoked = [p for d in a if d["event"] == "revoked" for p in d["partitions"]]
    assert len(a_revoked) == 2, f"a gives up exactly 2 partitions, incrementally: {a}"
    final_a, final_b = a[-1]["assignment"], b[-1]["assignment"]
    assert len(final_a) == 2 and len(final_b) == 2 and sorted(final_a + final_b) == everything, (final_a, final_b)
    assert sorted(a_revoked) == sorted(final_b), (a_revoked, final_b)
    b_assigned = sorted(p for d in b if d["event"] == "assigned" for p in d["partitions"])
    assert b_assigned == sorted(final_b), b
    records = ans.select(event="record")
    keys = [(d["partition"], d["offset"]) for d in records]
    assert len(keys) == len(set(keys)) == 200, f"{len(keys)} records consumed, {len(set(keys))} distinct, of 200"
    assert sorted(keys) == [(p, o) for p in range(4) for o in range(50)]
    assert sorted(d["value"] for d in records) == sorted(f"r{i}" for i in range(200))
    if target.name == "kafkalog":
        ref = workloads.reference("cooperative", lambda t: run_cooperative(workloads, t))

        def shape(x: Answer) -> dict:
            first = [d for d in x.lines if d.get("event") == "assigned"][0]
            return {"first": (first["member"], first["partitions"]),
                    "finals": sorted(len(d["assignment"]) for d in x.select(event="final")),
                    "records": len(x.select(event="record"))}
        assert_same(shape(ref), shape(ans), what="cooperative rebalance")


# -- group.protocol=consumer (KIP-848) ---------------------------------------------------------------------------

CONSUMER_GROUP_APIS = (68, 69)  # ConsumerGroupHeartbeat, ConsumerGroupDescribe


def run_kip848(workloads: Workloads, target: Target) -> Answer:
    return workloads.java("Kip848", [target.bootstrap, f"jc-{RUN}-k848", f"jc-{RUN}-k848-g"], target.name, timeout=60)


def run_kip848_without_support(workloads: Workloads, target: Target) -> Answer:
    """Kafka with ConsumerGroupHeartbeat hidden from its ApiVersions answer: a broker without KIP-848, as the
    client sees it."""
    with KafkaTap(port_of(target.bootstrap), hide_apis=CONSUMER_GROUP_APIS) as tap:
        ans = workloads.java("Kip848", [tap.bootstrap, f"jc-{RUN}-k848-hidden", f"jc-{RUN}-k848-hidden-g"],
                             "kafka without ConsumerGroupHeartbeat", timeout=60)
    assert not tap.errors, tap.errors[:5]
    return ans


def kip848_result(ans: Answer) -> dict:
    got = ans.select(event="result")
    assert len(got) == 1, f"no result line\n{ans.where()}"
    return got[0]


def test_group_protocol_consumer(workloads, target):
    res = kip848_result(workloads.get("kip848", target, lambda t: run_kip848(workloads, t)))
    without = kip848_result(workloads.reference("kip848-without", lambda t: run_kip848_without_support(workloads, t)))
    print(f"{target.name}: {res}\nKafka's client against a broker without KIP-848: {without}")
    # the reference error itself: immediate, not retriable, telling what to do
    assert not without["ok"] and without["error"] == "UnsupportedVersionException" and not without["retriable"]
    assert "group.protocol=classic" in without["message"] and without["elapsed_ms"] < 10_000, without
    # both brokers serve KIP-848: the consumer joins with ConsumerGroupHeartbeat, gets both partitions, commits
    assert res["ok"] and res["count"] == 5, res
    assert res["assignment"] == [f"jc-{RUN}-k848-0", f"jc-{RUN}-k848-1"], res


# -- the transactional producer ----------------------------------------------------------------------------------

def run_transactions(workloads: Workloads, target: Target) -> Answer:
    return workloads.java("Transactions", [target.bootstrap, f"jc-{RUN}-txn", f"jc-{RUN}-txn-id"], target.name,
                          timeout=90)


def test_transactional_producer(workloads, target):
    ans = workloads.get("transactions", target, lambda t: run_transactions(workloads, t))
    steps = {d["step"]: d for d in ans.lines if d.get("step") != "read"}
    init = steps.get("init")
    assert init is not None, ans.where()
    print(f"{target.name}: initTransactions {error_text(init)} after {init['elapsed_ms']} ms")
    failed = [f"{k}: {error_text(v)}" for k, v in steps.items() if not v["ok"]]
    assert not failed and list(steps) == ["init", "commit1", "abort", "commit2"], f"{failed}\n{ans.where()}"
    reads = {d["isolation"]: d for d in ans.select(step="read")}
    assert reads["read_committed"]["values"] == ["c1-0", "c1-1", "c1-2", "c2-0"], reads
    assert reads["read_uncommitted"]["values"] == ["c1-0", "c1-1", "c1-2", "a-0", "a-1", "c2-0"], reads
    # commit/abort markers take an offset each: 3 records + marker, 2 + marker, 1 + marker
    assert reads["read_committed"]["offsets"] == [0, 1, 2, 7] and reads["read_committed"]["end_offset"] == 9
    assert reads["read_uncommitted"]["offsets"] == [0, 1, 2, 4, 5, 7], reads
    assert reads["read_uncommitted"]["end_offset"] == 9 and reads["read_committed"]["position"] == 9, reads
    if target.name == "kafkalog":
        ref = workloads.reference("transactions", lambda t: run_transactions(workloads, t))
        assert_same(ref.select(step="read"), ans.select(step="read"), what="transactional reads")
        assert_same({d["step"]: d["ok"] for d in ref.lines if d.get("step") != "read"},
                    {k: v["ok"] for k, v in steps.items()}, what="transactional steps")


# -- the AdminClient ---------------------------------------------------------------------------------------------

ADMIN = f"jc-{RUN}-adm"
TOPIC_A, TOPIC_B, TOPIC_C, GROUP = f"{ADMIN}-a", f"{ADMIN}-b", f"{ADMIN}-c", f"{ADMIN}-g"


def run_admin(workloads: Workloads, target: Target) -> Answer:
    return workloads.java("AdminOps", [target.bootstrap, ADMIN, "plain"], target.name, timeout=150)


def expect_ops(workloads: Workloads, target: Target, expectations: dict, key: str = "admin", run=None,
               ignore=()) -> dict:
    """Check the named AdminOps answers on ``target``: an expectation ``{"error": "SimpleClassName"}`` wants that
    exception; any other dict lists fields the answer must have (a value, or a predicate on it: false, or a text
    saying what is wrong, fails). On kafkalog each
    answer is also compared with Kafka's (messages, timings and ``ignore`` aside: field paths inside an answer,
    fnmatch patterns, ``"op:path"`` for one op only). All problems, with the exact errors, are reported together."""
    run = run or (lambda t: run_admin(workloads, t))
    ans = workloads.get(key, target, run)
    ops = ans.ops
    problems = []
    for op, want in expectations.items():
        got = ops.get(op)
        if got is None:
            problems.append(f"{op}: no answer (the program stopped early?)")
            continue
        if "error" in want:
            if got["ok"] or got["error"] != want["error"]:
                problems.append(f"{op}: Kafka fails it with {want['error']}; got {error_text(got)}")
            continue
        if not got["ok"]:
            problems.append(f"{op}: {error_text(got)}")
            continue
        for field, value in want.items():
            verdict = value(got.get(field)) if callable(value) else got.get(field) == value
            if isinstance(verdict, str):  # a predicate's own account of what is wrong ("" = nothing)
                if verdict:
                    problems.append(f"{op}.{field}: {verdict}")
            elif not verdict:
                problems.append(f"{op}.{field}: {got.get(field)!r}, Kafka's answer: "
                                f"{'(a predicate)' if callable(value) else repr(value)}")
    if target.name == "kafkalog":
        ref = workloads.reference(key, run).ops
        failed = {p.split(":", 1)[0].split(".", 1)[0] for p in problems}
        for op in expectations:
            if op in failed:
                continue
            skip = ["elapsed_ms", "message", "causes"]
            skip += [pat.split(":", 1)[1] if ":" in pat else pat for pat in ignore
                     if ":" not in pat or pat.split(":", 1)[0] == op]
            problems += [f"{op}: {d}" for d in diff_answers(ref.get(op), ops.get(op), ignore=skip)]
    assert not problems, "\n".join([f"AdminClient on {target.name}:", *problems, ans.where()])
    return ops


def test_admin_describe_cluster(workloads, target):
    ops = expect_ops(workloads, target, {"describe_cluster": {
        "cluster_id": lambda v: isinstance(v, str) and v != "",
        "nodes": lambda v: len(v) == 1 and v[0]["host"] == "127.0.0.1" and v[0]["port"] == port_of(target.bootstrap),
    }}, ignore=("cluster_id", "nodes*.port"))
    d = ops["describe_cluster"]
    assert d["controller"] == d["nodes"][0]["id"], d


def test_admin_create_and_list_topics(workloads, target):
    expect_ops(workloads, target, {
        "create_topics": {},
        "create_topics_exists": {"error": "TopicExistsException"},
        "create_topics_validate_only": {"listed_after": False},
        "create_topics_invalid_name": {"error": "InvalidTopicException"},
        "create_topics_invalid_partitions": {"error": "InvalidPartitionsException"},
        "list_topics": {"names": [TOPIC_A, TOPIC_B]},
    })


def test_admin_create_topics_result_details(workloads, target):
    """CreateTopics v5+ answers the new topic's partitions, replication factor, id and configs."""
    expect_ops(workloads, target, {"create_topics_result_details": {
        "partitions": [3, 1], "replication": [1, 1], "topic_id": lambda v: v not in (None, ZERO_UUID),
        "configs": {
            "cleanup.policy": {"value": "delete", "source": "DYNAMIC_TOPIC_CONFIG", "default": False,
                               "read_only": False, "sensitive": False},
            "retention.ms": {"value": "86400000", "source": "DYNAMIC_TOPIC_CONFIG", "default": False,
                             "read_only": False, "sensitive": False}},
    }}, ignore=("topic_id",))


def test_admin_describe_topics(workloads, target):
    ops = expect_ops(workloads, target, {
        "describe_topics": {"name": TOPIC_A, "internal": False,
                            "partitions": lambda v: [p["partition"] for p in v] == [0, 1, 2]},
        "describe_topics_missing": {"error": "UnknownTopicOrPartitionException"},
    }, ignore=("describe_topics:topic_id",))
    node = ops["describe_cluster"]["nodes"][0]["id"] if ops["describe_cluster"]["ok"] else 1
    for p in ops["describe_topics"]["partitions"]:
        assert (p["leader"], p["replicas"], p["isr"]) == (node, [node], [node]), p


def test_admin_topic_ids(workloads, target):
    """Every Kafka topic has an id (KIP-516), in Metadata v10+ and DescribeTopicPartitions answers."""
    expect_ops(workloads, target, {"describe_topics": {"topic_id": lambda v: v not in (None, ZERO_UUID)}},
               ignore=("topic_id",))


def test_admin_create_partitions(workloads, target):
    expect_ops(workloads, target, {
        "create_partitions": {"described_partitions": 5},
        "create_partitions_decrease": {"error": "InvalidPartitionsException"},
    })


def _config(value, source, default, read_only=False):
    return {"value": value, "source": source, "default": default, "read_only": read_only, "sensitive": False}


# topic configs of Kafka 4.4 that kafkalog does not serve (README, compatibility table): tiered storage, replication
# throttles, per-codec compression levels (kafkalog never recompresses), share groups' dead-letter queue, and the
# decompressed-size bound (kafkalog's own bound is documented with the broker's limits)
TOPIC_CONFIGS_NOT_SERVED = frozenset({
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level", "errors.deadletterqueue.group.enable",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas", "local.retention.bytes",
    "local.retention.ms", "max.decompressed.message.bytes", "remote.copy.lag.bytes", "remote.copy.lag.ms",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable"})


def test_admin_describe_configs(workloads, target):
    def topic_config_names(names):
        if target.name == "kafka":
            return {"retention.ms", "cleanup.policy", "segment.bytes"} <= set(names)
        ref = workloads.reference("admin", lambda t: run_admin(workloads, t))
        kafka = set(ref.ops["describe_configs_topic"]["names"])
        # the keys of features kafkalog does not have, listed in the README's compatibility table: exactly these
        missing, extra = sorted(kafka - set(names) - TOPIC_CONFIGS_NOT_SERVED), sorted(set(names) - kafka)
        return (f"missing {len(missing)} of Kafka's {len(kafka)} topic configs: {missing}" if missing else "") + \
            (f"; not Kafka's: {extra}" if extra else "")

    expect_ops(workloads, target, {
        "describe_configs_topic": {"configs": {
            "retention.ms": _config("86400000", "DYNAMIC_TOPIC_CONFIG", False),
            "cleanup.policy": _config("delete", "DYNAMIC_TOPIC_CONFIG", False),
            "segment.bytes": _config("1073741824", "DEFAULT_CONFIG", True),
            "max.message.bytes": _config("1048588", "DEFAULT_CONFIG", True),
            "compression.type": _config("producer", "DEFAULT_CONFIG", True),
            "message.timestamp.type": _config("CreateTime", "DEFAULT_CONFIG", True)},
            "names": topic_config_names},
        "describe_configs_broker": {
            "configs": lambda c: c["num.partitions"]["value"] == "1"
            and c["auto.create.topics.enable"]["value"] == "true"
            and c["log.segment.bytes"]["value"] == "1073741824" and c["message.max.bytes"]["value"] == "1048588",
        },
    }, ignore=("names", "count", "describe_configs_broker:configs.*.read_only"))


def test_admin_incremental_alter_configs(workloads, target):
    expect_ops(workloads, target, {
        "incremental_alter_configs": {"configs": lambda c: c["retention.ms"] == _config(
            "3600000", "DYNAMIC_TOPIC_CONFIG", False) and c["cleanup.policy"] == _config("delete", "DEFAULT_CONFIG",
                                                                                          True)},
        "incremental_alter_configs_bad_value": {"error": "InvalidConfigurationException"},
        "incremental_alter_configs_unknown_key": {"error": "InvalidConfigurationException"},
    })


def test_admin_list_offsets(workloads, target):
    expect_ops(workloads, target, {
        "list_offsets_earliest": {"offset": 0},
        "list_offsets_latest": {"offset": 10},
        "list_offsets_max_timestamp": {"offset": 6},
    })


def test_admin_delete_records(workloads, target):
    expect_ops(workloads, target, {
        "delete_records": {"low_watermark": 4},
        "list_offsets_earliest_after_delete": {"offset": 4},
        "delete_records_out_of_range": {"error": "OffsetOutOfRangeException"},
    })


def test_admin_list_groups(workloads, target):
    def listed(state, with_protocol):
        entry = {"group_id": GROUP, "type": "Classic", "state": state, "simple": False}
        if with_protocol:
            entry["protocol"] = "consumer"
        return [entry]
    expect_ops(workloads, target, {
        "list_groups_active": {"groups": listed("STABLE", True)},
        "list_consumer_groups_active": {"groups": listed("STABLE", False)},
        "list_groups_empty": {"groups": listed("EMPTY", True)},
    })


def test_admin_describe_consumer_groups(workloads, target):
    member = {"client_id": "admin-ops-member", "member_id_set": True, "host": "/127.0.0.1",
              "assignment": [f"{TOPIC_A}-{p}" for p in range(5)]}
    expect_ops(workloads, target, {
        "describe_consumer_groups_active": {"group_id": GROUP, "state": "STABLE", "type": "Classic",
                                            "simple": False, "assignor": "range", "members": [member]},
        "describe_consumer_groups_empty": {"state": "EMPTY", "members": [], "assignor": ""},
        "describe_consumer_groups_deleted": {"error": "GroupIdNotFoundException"},
    })


def test_admin_list_consumer_group_offsets(workloads, target):
    expect_ops(workloads, target, {"list_consumer_group_offsets": {"offsets": {
        f"{TOPIC_A}-0": {"offset": 7, "metadata": "seven"}, f"{TOPIC_A}-1": {"offset": 0, "metadata": ""}}}})


def test_admin_alter_consumer_group_offsets(workloads, target):
    expect_ops(workloads, target, {
        # a group with live members refuses offsets from outside it
        "alter_consumer_group_offsets_active": {"error": "UnknownMemberIdException"},
        "alter_consumer_group_offsets": {"offsets": {
            f"{TOPIC_A}-0": {"offset": 3, "metadata": "three"}, f"{TOPIC_A}-1": {"offset": 0, "metadata": ""},
            f"{TOPIC_A}-2": {"offset": 5, "metadata": ""}}},
    })


def test_admin_delete_consumer_group_offsets(workloads, target):
    expect_ops(workloads, target, {"delete_consumer_group_offsets": {"offsets": {
        f"{TOPIC_A}-0": {"offset": 3, "metadata": "three"}, f"{TOPIC_A}-2": {"offset": 5, "metadata": ""}}}})


def test_admin_delete_consumer_groups(workloads, target):
    expect_ops(workloads, target, {
        "delete_consumer_groups": {"groups_after": []},
        "delete_consumer_groups_missing": {"error": "GroupIdNotFoundException"},
    })


def test_admin_delete_topics(workloads, target):
    expect_ops(workloads, target, {
        "delete_topics": {"listed_after": False},
        "delete_topics_missing": {"error": "UnknownTopicOrPartitionException"},
    })


def test_admin_scram_credentials(workloads, target):
    expect_ops(workloads, target, {
        "describe_user_scram_credentials_all": {"has_user": False},
        "alter_user_scram_credentials_upsert": {"described": [["SCRAM-SHA-256", 4096], ["SCRAM-SHA-512", 8192]]},
        "alter_user_scram_credentials_twice_in_one_request": {"error": "DuplicateResourceException"},
        "alter_user_scram_credentials_delete": {"described": [["SCRAM-SHA-512", 8192]]},
        "describe_user_scram_credentials_missing": {"error": "ResourceNotFoundException"},
    })


def test_admin_describe_log_dirs(workloads, target):
    expect_ops(workloads, target, {"describe_log_dirs": {"dirs": 1, "replicas_seen": True,
                                                         "a0_size": lambda n: n > 0}},
               ignore=("a0_size",))


def test_admin_acls_without_authorizer(workloads, target):
    expect_ops(workloads, target, {"describe_acls_no_authorizer": {"error": "SecurityDisabledException"}})


@pytest.fixture(scope="module")
def acl_brokers(tmp_path_factory):
    """A broker pair with an authorizer (User:ANONYMOUS, every PLAINTEXT client, a super user), started on first
    use: {"kafka": KafkaBroker, "kafkalog": KafkalogServer}."""
    started = {}

    def get(name: str):
        if name not in started:
            workdir = tmp_path_factory.mktemp(f"{name}-acl")
            server = (KafkaBroker(AUTHORIZER["kafka"], heap=["-Xmx384m", "-Xms128m"]) if name == "kafka"
                      else KafkalogServer(AUTHORIZER["kafkalog"]))
            started[name] = (server, workdir)
            try:
                server.start(workdir)
            except (LabError, OSError) as e:
                pytest.fail(f"{name} with an authorizer did not start: {e}\n{server.log_tail()}", pytrace=False)
        return started[name][0]
    yield get
    for server, workdir in started.values():
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_admin_acls(workloads, target, acl_brokers):
    prefix = f"jc-{RUN}-acl"

    def run(tg: Target) -> Answer:  # on the authorizer broker of tg's kind
        return workloads.java("AdminOps", [acl_brokers(tg.name).bootstrap, prefix, "acl"],
                              f"{tg.name} with an authorizer", timeout=90)
    bob_topic = ["TOPIC", f"{prefix}-t", "LITERAL", "User:bob", "*", "READ", "ALLOW"]
    bob_group = ["GROUP", f"{prefix}-", "PREFIXED", "User:bob", "*", "READ", "ALLOW"]
    eve = ["TOPIC", f"{prefix}-t", "LITERAL", "User:eve", "*", "WRITE", "DENY"]
    ops_ = ["CLUSTER", "kafka-cluster", "LITERAL", f"User:{prefix}-ops", "127.0.0.1", "DESCRIBE_CONFIGS", "ALLOW"]
    expect_ops(workloads, target, {
        "create_acls": {},
        "describe_acls_all": {"bindings": [ops_, bob_group, bob_topic, eve]},
        "describe_acls_by_principal": {"bindings": [bob_group, bob_topic]},
        "describe_acls_match_topic": {"bindings": [bob_topic, eve]},
        "create_acls_invalid": {"error": "InvalidRequestException"},
        "delete_acls": {"deleted": [eve], "remaining": [ops_, bob_group, bob_topic]},
        "delete_acls_rest": {"deleted": [ops_, bob_group, bob_topic], "remaining": []},
    }, key="acls", run=run)
