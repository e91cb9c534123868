"""A small Kafka client of kafkalog's own for tests and their helpers: one blocking socket, the broker's codec, no
third-party client needed. It creates and deletes topics, produces records with the keys, headers and timestamps a
test chooses, reads a topic back, lists offsets and describes groups. PLAINTEXT and SASL_PLAINTEXT (PLAIN).

Not thread-safe: one ``Admin`` per thread, or one shared under a lock (``LocalBroker``'s helpers share one
connection per broker that way).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable

from .._engine.batch import build_batch, iter_batches
from ..broker import protocol
from ..broker.faults import KNOWN_CODES
from ..errors import KafkaError, for_code
from ..structs import ConsumerRecord

_SIZE = struct.Struct(">i")
# versions this client speaks (every one of them served by kafkalog and by Apache Kafka 4.x)
_METADATA, _PRODUCE, _FETCH, _LIST_OFFSETS, _CREATE, _DELETE = 9, 8, 11, 5, 4, 4
_DESCRIBE_GROUPS, _LIST_GROUPS, _HANDSHAKE, _AUTHENTICATE = 5, 4, 1, 1


def raise_for(code: int, what: str) -> None:
    if code:
        cls = for_code(code)
        name = cls.name if cls.code == code else {c: n for n, c in KNOWN_CODES.items()}.get(code, "error")
        err = cls(f"{what}: {name} ({code})")
        err.code = code  # for codes kafkalog has no class of its own (UnknownServerError keeps the real one)
        raise err


class Admin:
    """``Admin("127.0.0.1:9092")`` (or ``sasl=("user", "password")`` on a SASL_PLAINTEXT listener).

    Records are ``(value)``, ``(key, value)`` pairs, or dicts ``{"value", "key", "headers", "timestamp",
    "partition"}``; values and keys may be ``str`` (UTF-8) or bytes."""

    def __init__(self, bootstrap: str, sasl: tuple[str, str] | None = None, timeout: float = 30.0,
                 client_id: str = "kafkalog-testing"):
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.address = (host or "127.0.0.1", int(port))
        self.sasl = sasl
        self.timeout = timeout
        self.client_id = client_id
        self._sock: socket.socket | None = None
        self._corr = 0
        # topics this client made or saw, with their partition counts: a produce to one of them asks no Metadata
        # first (an UNKNOWN_TOPIC_OR_PARTITION answer drops the entry and asks); reads always ask, another client
        # may have added partitions
        self._known: dict[str, int] = {}

    # -- connection -------------------------------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        if self._sock is None:
            s = socket.create_connection(self.address, timeout=self.timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = s
            if self.sasl is not None:
                try:
                    self._authenticate(*self.sasl)
                except BaseException:
                    self.close()
                    raise
        return self._sock

    def _authenticate(self, user: str, password: str) -> None:
        hs = self.call(17, _HANDSHAKE, {"mechanism": "PLAIN"})
        raise_for(hs["error_code"], "SaslHandshake PLAIN")
        r = self.call(36, _AUTHENTICATE, {"auth_bytes": b"\0" + user.encode() + b"\0" + password.encode()})
        raise_for(r["error_code"], f"SASL PLAIN as {user}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, api_key: int, version: int, body: dict) -> dict:
        """One request, its answer (a dict in the codec's field names). A dropped connection is retried once on a
        new one (a restarted broker)."""
        for attempt in (0, 1):
            s = self._connect()
            self._corr += 1
            try:
                s.sendall(protocol.encode_request(api_key, version, self._corr, self.client_id, body))
                (size,) = _SIZE.unpack(self._read(4))
                corr, resp = protocol.decode_response(api_key, version, self._read(size))
            except (ConnectionError, EOFError):
                self.close()
                if attempt or api_key in (17, 36):
                    raise
                continue
            if corr != self._corr:
                self.close()
                raise KafkaError(f"correlation id {corr}, expected {self._corr}")
            return resp
        raise AssertionError("unreachable")

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self._sock.recv(n - len(out))
            if not chunk:
                raise EOFError("the broker closed the connection")
            out += chunk
        return bytes(out)

    # -- topics -----------------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None) -> str:
        resp = self.call(19, _CREATE, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": [{"name": k, "value": str(v)} for k, v in (config or {}).items()]}],
            "timeout_ms": int(self.timeout * 1000), "validate_only": False})
        t = resp["topics"][0]
        raise_for(t["error_code"], f"CreateTopics {name}: {t.get('error_message') or ''}")
        self._known[name] = partitions
        return name

    def delete_topic(self, name: str, missing_ok: bool = True) -> None:
        self._known.pop(name, None)
        resp = self.call(20, _DELETE, {"topic_names": [name], "timeout_ms": int(self.timeout * 1000)})
        code = resp["responses"][0]["error_code"]
        if code == 3 and missing_ok:
            return
        raise_for(code, f"DeleteTopics {name}")

    def metadata(self, topics: Iterable[str] | None = None, auto_create: bool = False) -> dict:
        """{topic: number of partitions} of the named topics (all when None); an unknown one is left out (or made,
        with ``auto_create`` on a broker with auto.create.topics.enable, as a producer's Metadata request does)."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": auto_create, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        resp = self.call(3, _METADATA, body)
        found = {t["name"]: len(t["partitions"]) for t in resp["topics"] if t["error_code"] == 0}
        if topics is not None:
            for t in topics:
                self._known.pop(t, None)
        self._known.update(found)
        return found

    def topics(self) -> list[str]:
        return sorted(t for t in self.metadata() if not t.startswith("__"))

    def partitions(self, topic: str) -> int:
        n = self.metadata([topic]).get(topic)
        if n is None:
            raise_for(3, f"topic {topic}")
        return n

    # -- records ----------------------------------------------------------------------------------------------

    def produce(self, topic: str, records, partition: int | None = None, acks: int = -1) -> list[tuple[int, int]]:
        """Write ``records`` (see the class docstring), one batch per partition, in order; ``partition`` for those
        that name none (default 0). Returns each record's (partition, offset)."""
        by_part: dict[int, list] = {}
        order = []
        for rec in records:
            value, key, headers, ts, p = _record(rec)
            p = partition if p is None else p
            p = 0 if p is None else p
            by_part.setdefault(p, []).append((value, key, headers, ts))
            order.append((p, len(by_part[p]) - 1))
        if not by_part:
            return []
        data = []
        for p, recs in by_part.items():
            batch = build_batch([r[0] for r in recs], keys=[r[1] for r in recs],
                                timestamps=[r[3] for r in recs], headers=[r[2] for r in recs])
            data.append({"index": p, "records": bytes(batch)})
        for known in (topic in self._known, False):
            if not known and topic not in self.metadata([topic]):  # as a producer does: its Metadata request
                for _ in range(50):                                 # makes the topic
                    if topic in self.metadata([topic], auto_create=True):
                        break
                    time.sleep(0.01)
            resp = self.call(0, _PRODUCE, {"transactional_id": None, "acks": acks,
                                           "timeout_ms": int(self.timeout * 1000),
                                           "topic_data": [{"name": topic, "partition_data": data}]})
            answers = resp["responses"][0]["partition_responses"]
            if known and any(pr["error_code"] == 3 for pr in answers):
                self._known.pop(topic, None)  # deleted (or fewer partitions) since: ask, as a producer would
                continue
            break
        base = {}
        for pr in answers:
            raise_for(pr["error_code"], f"Produce to {topic}-{pr['index']}")
            base[pr["index"]] = pr["base_offset"]
        return [(p, base[p] + i) for p, i in order]

    def list_offsets(self, topic: str, timestamp: int = -1, partitions: Iterable[int] | None = None
                     ) -> dict[int, int]:
        """{partition: offset} of every partition (or those given): latest (-1), earliest (-2), or the first offset
        at or after ``timestamp`` (ms; -1 when none)."""
        parts = range(self.partitions(topic)) if partitions is None else partitions
        resp = self.call(2, _LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [{
            "name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                                          for p in parts]}]})
        out = {}
        for pr in resp["topics"][0]["partitions"]:
            raise_for(pr["error_code"], f"ListOffsets {topic}-{pr['partition_index']}")
            out[pr["partition_index"]] = pr["offset"]
        return out

    def fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int = 0) -> tuple[list, int, int]:
        """(records from ``offset`` on as ConsumerRecord, the high watermark, the offset after the last batch
        returned): one Fetch. Control batches (transaction markers) are left out."""
        pr = self._fetch(topic, partition, offset, max_wait_ms)
        raise_for(pr["error_code"], f"Fetch {topic}-{partition} at {offset}")
        return self._records(topic, partition, offset, pr)

    def _fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int = 0) -> dict:
        resp = self.call(1, _FETCH, {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
                                     "max_bytes": 1 << 24, "isolation_level": 0, "session_id": 0,
                                     "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                         {"partition": partition, "current_leader_epoch": -1,
                                          "fetch_offset": offset, "log_start_offset": -1,
                                          "partition_max_bytes": 1 << 24}]}],
                                     "forgotten_topics_data": [], "rack_id": ""})
        return resp["responses"][0]["partitions"][0]

    @staticmethod
    def _records(topic: str, partition: int, offset: int, pr: dict) -> tuple[list, int, int]:
        out = []
        after = offset
        for batch in iter_batches(pr["records"] or b""):
            after = max(after, batch.next_offset)
            if batch.is_control:
                continue
            for r in batch.records():
                if r.offset >= offset:
                    out.append(ConsumerRecord(topic, partition, None, r.offset, r.timestamp, r.timestamp_type,
                                              r.key, r.value, list(r.headers), None,
                                              -1 if r.key is None else len(r.key),
                                              -1 if r.value is None else len(r.value), -1))
        return out, pr["high_watermark"], after

    def read(self, topic: str, partition: int | None = None, from_offset: int | None = None,
             partitions: int | None = None) -> list:
        """Every record of the topic (or one partition) up to its high watermark now, in partition then offset
        order (from the log start, or ``from_offset``). ``partitions``: the topic's count when the caller has just
        asked (else one Metadata request asks)."""
        if partition is not None:
            parts = [partition]
        else:
            parts = range(self.partitions(topic) if partitions is None else partitions)
        out = []
        for p in parts:
            pos = 0 if from_offset is None else from_offset
            ask_start = from_offset is None
            while True:
                pr = self._fetch(topic, p, pos)
                if pr["error_code"] == 1 and ask_start:  # OFFSET_OUT_OF_RANGE: records before the log start were
                    ask_start = False                     # deleted; one ListOffsets more finds it
                    pos = self.list_offsets(topic, -2, [p])[p]
                    continue
                raise_for(pr["error_code"], f"Fetch {topic}-{p} at {pos}")
                recs, hwm, after = self._records(topic, p, pos, pr)
                out += recs
                if after <= pos or after >= hwm:  # the end, or nothing returned (a stalled partition)
                    break
                pos = after
        return out

    # -- groups -----------------------------------------------------------------------------------------------

    def describe_group(self, group: str) -> dict:
        """{"state", "protocol", "members": [{"member_id", "client_id", "assignment" (bytes)}]} (Kafka's names)."""
        resp = self.call(15, _DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False})
        g = resp["groups"][0]
        if g["error_code"] not in (0, 69):
            raise_for(g["error_code"], f"DescribeGroups {group}")
        return {"state": g["group_state"] if g["error_code"] == 0 else "Dead", "protocol": g["protocol_data"],
                "members": [{"member_id": m["member_id"], "client_id": m["client_id"],
                             "assignment": m["member_assignment"]} for m in g["members"]]}

    def list_groups(self) -> dict[str, str]:
        resp = self.call(16, _LIST_GROUPS, {"states_filter": []})
        raise_for(resp["error_code"], "ListGroups")
        return {g["group_id"]: g["group_state"] for g in resp["groups"]}


def _bytes(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def _record(rec):
    """(value, key, headers, timestamp, partition) of one record as a test writes it."""
    key = headers = p = None
    ts = -1
    if isinstance(rec, dict):
        value, key, headers = rec.get("value"), rec.get("key"), rec.get("headers")
        ts = rec.get("timestamp", -1)
        p = rec.get("partition")
    elif isinstance(rec, tuple):
        key, value = rec
    else:
        value = rec
    if headers is not None:
        headers = [(k, _bytes(v)) for k, v in (headers.items() if isinstance(headers, dict) else headers)]
    if ts is None:
        ts = -1
    elif not isinstance(ts, int):  # a datetime
        ts = int(ts.timestamp() * 1000)
    return _bytes(value), _bytes(key), headers, ts, p


def now_ms() -> int:
    return int(time.time() * 1000)
