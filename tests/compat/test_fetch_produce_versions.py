"""Fetch v4-18 and Produce v3-11 on the wire, kafkalog against Apache Kafka 4.4 (issue 24, part 3).

The same request frames go to both brokers (raw sockets, kafkalog's table codec, itself checked byte for byte against
kio in tests/broker/test_codec.py) and the answers are compared field by field:

- Produce at every version 3-11 (8+: record_errors / error_message; 9+: flexible), and Kafka's INVALID_RECORD answer
  to keyless records on a compacted topic, which lists each such record (KIP-467) from v8;
- Fetch at every version 4-18 (12+: flexible; 13+: topics by id), records byte for byte;
- topic ids: an id no topic has (UNKNOWN_TOPIC_ID per partition, listed after the partitions read, as Kafka lists
  the partitions it refuses before reading), a topic named by id in a forgotten list;
- fetch sessions (KIP-227) across v13: a session made before v13 continued at v13 and the other way round
  (FETCH_SESSION_TOPIC_ID_ERROR), an incremental fetch by topic id.

What truly differs is left out of the comparison: topic ids and fetch session ids (random on each broker; each is
checked against the broker's own), and ``aborted_transactions`` of read_uncommitted fetches (Kafka answers null,
kafkalog an empty array, which every client takes alike). One broker pair for the module (the session's), about 2 s
of requests in all once both run.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from kafkalog._engine.batch import build_batch
from kafkalog.broker import protocol

from .lab import assert_same

PRODUCE, FETCH, METADATA, CREATE_TOPICS = 0, 1, 3, 19
UNKNOWN_TOPIC_ID = 100
FETCH_SESSION_TOPIC_ID_ERROR = 106
INVALID_RECORD = 87
# fields whose values are the broker's own, not the protocol's: checked separately
IGNORE_IDS = ("responses[*].topic_id", "session_id")
IGNORE_ABORTED = ("responses[*].partitions[*].aborted_transactions",)


class Raw:
    """One connection speaking through kafkalog's table codec."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.corr = 0

    def close(self):
        self.sock.close()

    def call(self, key: int, version: int, body: dict) -> dict:
        self.corr += 1
        self.sock.sendall(protocol.encode_request(key, version, self.corr, "versions-lab", body))
        (size,) = struct.unpack(">i", self._read(4))
        corr, resp = protocol.decode_response(key, version, self._read(size))
        assert corr == self.corr
        return resp

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the broker closed the connection"
            out += chunk
        return bytes(out)


def plain(value):
    """A decoded answer with bytes for memoryviews (records compared byte for byte, but for each batch's partition
    leader epoch: Kafka stamps its leader epoch, 0, where kafkalog keeps the producer's -1, a difference of the
    stored batches, not of these APIs)."""
    if isinstance(value, dict):
        return {k: without_leader_epochs(v) if k == "records" else plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return value.tobytes()
    return value


def without_leader_epochs(data):
    if data is None:
        return None
    out = bytearray(data)
    pos = 0
    while pos + 12 <= len(out):
        size = struct.unpack_from(">i", out, pos + 8)[0]
        out[pos + 12:pos + 16] = b"\xff" * 4
        pos += 12 + size
    return bytes(out)


def records(values, keys=None):
    now = int(time.time() * 1000)
    return bytes(build_batch(values, keys=keys, timestamps=[now + i for i in range(len(values))]))


class Side:
    """One broker with the module's topics: ``a`` (2 partitions), ``b`` (1) and the compacted ``c`` (1)."""

    def __init__(self, target, names: dict):
        self.name = target.name
        self.conn = Raw(target.bootstrap)
        self.topics = names
        created = self.conn.call(CREATE_TOPICS, 4, {"topics": [
            {"name": names["a"], "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": names["b"], "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": names["c"], "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "cleanup.policy", "value": "compact"}]}], "timeout_ms": 30000,
            "validate_only": False})
        assert [t["error_code"] for t in created["topics"]] == [0, 0, 0], created
        self.ids = self._ids()

    def _ids(self) -> dict:
        deadline = time.monotonic() + 30
        while True:
            md = self.conn.call(METADATA, 12, {"topics": [{"name": n, "topic_id": uuid.UUID(int=0)}
                                                         for n in self.topics.values()],
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
            ids = {t["name"]: t["topic_id"] for t in md["topics"] if t["error_code"] == 0 and t["partitions"]}
            if len(ids) == len(self.topics) or time.monotonic() > deadline:
                assert len(ids) == len(self.topics), md
                return {k: ids[n] for k, n in self.topics.items()}
            time.sleep(0.1)

    def produce(self, version: int, topic: str, partition: int, data: bytes, acks: int = -1) -> dict:
        return self.conn.call(PRODUCE, version, {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
                                                 "topic_data": [{"name": self.topics[topic], "partition_data": [
                                                     {"index": partition, "records": data}]}]})

    def fetch(self, version: int, parts, session_id=0, epoch=-1, forgotten=(), max_wait_ms=0) -> dict:
        """``parts``: [(topic key or a uuid.UUID, partition, fetch offset)]."""
        topics, forgotten_topics = [], []
        for key, partition, offset in parts:
            entry = self._topic_entry(key)
            if topics and topics[-1]["topic"] == entry["topic"] and topics[-1]["topic_id"] == entry["topic_id"]:
                entry = topics[-1]
            else:
                entry["partitions"] = []
                topics.append(entry)
            entry["partitions"].append({"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                        "last_fetched_epoch": -1, "log_start_offset": -1,
                                        "partition_max_bytes": 1 << 20})
        for key, partition in forgotten:
            forgotten_topics.append({**self._topic_entry(key), "partitions": [partition]})
        return plain(self.conn.call(FETCH, version, {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 0, "max_bytes": 50 << 20,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch, "topics": topics,
            "forgotten_topics_data": forgotten_topics, "rack_id": ""}))

    def _topic_entry(self, key) -> dict:
        if isinstance(key, uuid.UUID):
            return {"topic": "", "topic_id": key}
        return {"topic": self.topics[key], "topic_id": self.ids[key]}

    def names_in(self, answer: dict) -> list:
        """The answer's topics as the module's keys ("a", "b", "c"; an unknown id as itself)."""
        by_id = {v: k for k, v in self.ids.items()}
        by_name = {v: k for k, v in self.topics.items()}
        return [by_id.get(t["topic_id"], t["topic_id"]) if t["topic"] == "" else by_name[t["topic"]]
                for t in answer["responses"]]


@pytest.fixture(scope="module")
def sides(kafka, kafkalog):
    names = {k: f"versions-{k}-{uuid.uuid4().hex[:8]}" for k in "abc"}
    out = {}
    from .lab import Target
    for name, server in (("kafka", kafka), ("kafkalog", kafkalog)):
        out[name] = Side(Target(name, server.bootstrap, server), names)
    # the same records on both: 3 in a-0, 2 in a-1, 1 in b-0
    for topic, partition, values in (("a", 0, [b"x", b"y", b"z"]), ("a", 1, [b"p", b"q"]), ("b", 0, [b"only"])):
        data = records(values)
        for side in out.values():
            for _ in range(300):  # a topic Kafka just made may have no leader yet (NOT_LEADER_OR_FOLLOWER)
                r = side.produce(7, topic, partition, data)
                if r["responses"][0]["partition_responses"][0]["error_code"] != 6:
                    break
                time.sleep(0.1)
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, (side.name, r)
    yield out
    for side in out.values():
        side.conn.close()


def both(sides, call):
    return call(sides["kafka"]), call(sides["kafkalog"])


def check_ids(sides, answers, expected_keys):
    """Each answer names its topics as ``expected_keys`` in its own broker's ids (or names before v13)."""
    for name, answer in zip(("kafka", "kafkalog"), answers):
        assert sides[name].names_in(answer) == expected_keys, (name, answer)


# -- Produce --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(3, 12))
def test_produce_at_every_version(sides, version):
    data = records([b"v%d" % version], keys=[b"k"])
    k, kl = both(sides, lambda s: s.produce(version, "b", 0, data))
    assert k["responses"][0]["partition_responses"][0]["error_code"] == 0, k
    assert_same(k, kl, what=f"Produce v{version}")


@pytest.mark.parametrize("version", [7, 8, 9, 11])
def test_produce_keyless_records_to_a_compacted_topic(sides, version):
    # two of the three records have no key: Kafka's LogValidator drops the batch with INVALID_RECORD, and from v8
    # lists each keyless record by its index in the batch
    data = records([b"a", b"b", b"c"], keys=[None, b"k", None])
    k, kl = both(sides, lambda s: s.produce(version, "c", 0, data))
    part = k["responses"][0]["partition_responses"][0]
    assert part["error_code"] == INVALID_RECORD, k
    if version >= 8:
        assert [e["batch_index"] for e in part["record_errors"]] == [0, 2], k
    # the messages name the topic partition, the same name on both
    assert_same(k, kl, what=f"Produce v{version} of keyless records to a compacted topic")


# -- Fetch ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_at_every_version(sides, version):
    # a-0 listed twice: read once, with its last values (Kafka's fetch data is a map)
    parts = [("a", 0, 0), ("b", 0, 0), ("a", 1, 0), ("a", 0, 1)]
    k, kl = both(sides, lambda s: s.fetch(version, parts))
    assert k["error_code"] == 0 and k["responses"][0]["partitions"][0]["records"], k
    assert_same(k, kl, ignore=IGNORE_IDS + IGNORE_ABORTED, what=f"Fetch v{version}")
    # a topic's partitions next to each other share its entry; apart, each run has one (Kafka's FetchResponse.of)
    check_ids(sides, (k, kl), ["a", "b", "a"])


@pytest.mark.parametrize("version", [13, 16, 17, 18])
def test_fetch_an_unknown_topic_id(sides, version):
    nobody = uuid.UUID("6b0d3c5e-7f6a-4d0e-9a55-000000000024")
    parts = [("a", 0, 0), (nobody, 0, 0), (nobody, 3, 0), ("b", 0, 0)]
    k, kl = both(sides, lambda s: s.fetch(version, parts))
    codes = [[p["error_code"] for p in t["partitions"]] for t in k["responses"]]
    assert UNKNOWN_TOPIC_ID in sum(codes, []), k
    assert_same(k, kl, ignore=IGNORE_IDS + IGNORE_ABORTED, what=f"Fetch v{version} naming an unknown topic id")
    assert sides["kafka"].names_in(k) == sides["kafkalog"].names_in(kl)


@pytest.mark.parametrize("version", [11, 12])
def test_fetch_an_unknown_topic_name(sides, version):
    parts = [("a", 0, 0), ("b", 0, 0)]

    def call(s):
        s.topics["nobody"] = "versions-nobody-" + s.topics["a"][-8:]
        s.ids["nobody"] = uuid.UUID(int=0)
        try:
            return s.fetch(version, [parts[0], ("nobody", 0, 0), parts[1]])
        finally:
            del s.topics["nobody"], s.ids["nobody"]
    k, kl = both(sides, call)
    assert_same(k, kl, ignore=IGNORE_ABORTED, what=f"Fetch v{version} naming a topic that does not exist")


# -- sessions (KIP-227) across v13 ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("made_at", "continued_at"), [(12, 13), (13, 12), (11, 17)])
def test_a_session_continued_on_the_other_side_of_v13(sides, made_at, continued_at):
    def call(s):
        first = s.fetch(made_at, [("a", 0, 3), ("b", 0, 1)], session_id=0, epoch=0)
        sid = first["session_id"]
        assert sid != 0, first
        second = s.fetch(continued_at, [], session_id=sid, epoch=1)
        # the session is still there, for a request on its side of v13
        third = s.fetch(made_at, [], session_id=sid, epoch=1)
        s.fetch(made_at, [], session_id=sid, epoch=-1)  # close it
        return [first, second, third]
    k, kl = both(sides, call)
    assert k[1]["error_code"] == FETCH_SESSION_TOPIC_ID_ERROR and k[1]["responses"] == [], k
    assert k[2]["error_code"] == 0, k
    assert kl[2]["session_id"] == kl[0]["session_id"] != 0
    assert_same(k, kl, ignore=tuple(f"[*].{p}" for p in IGNORE_IDS + IGNORE_ABORTED),
                what=f"a session made at v{made_at}, continued at v{continued_at}")


@pytest.mark.parametrize("version", [13, 17])
def test_an_incremental_session_by_topic_id(sides, version):
    late = records([b"r"])

    def call(s):
        out = [s.fetch(version, [("a", 0, 0), ("a", 1, 0), ("b", 0, 0)], session_id=0, epoch=0)]
        sid = out[0]["session_id"]
        # nothing new: an empty incremental answer
        out.append(s.fetch(version, [], session_id=sid, epoch=1))
        # a-1 moves on (listed again at its new offset), b-0 is forgotten by its id
        out.append(s.fetch(version, [("a", 1, 2)], session_id=sid, epoch=2, forgotten=[("b", 0)]))
        r = s.produce(9, "a", 1, late)
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
        out.append(s.fetch(version, [], session_id=sid, epoch=3))
        # an id no topic has, added to the session: UNKNOWN_TOPIC_ID, the session goes on
        out.append(s.fetch(version, [(uuid.UUID(int=24), 0, 0)], session_id=sid, epoch=4))
        out.append(s.fetch(version, [], session_id=sid, epoch=5))
        s.fetch(version, [], session_id=sid, epoch=-1)
        return out
    k, kl = both(sides, call)
    assert [a["error_code"] for a in k] == [0] * 6, k
    assert k[3]["responses"] and k[3]["responses"][0]["partitions"][0]["records"], k[3]
    assert all(a["session_id"] == kl[0]["session_id"] != 0 for a in kl), kl
    assert_same(k, kl, ignore=tuple(f"[*].{p}" for p in IGNORE_IDS + IGNORE_ABORTED),
                what=f"an incremental fetch session at v{version}")
    for i, (ka, kla) in enumerate(zip(k, kl)):
        assert sides["kafka"].names_in(ka) == sides["kafkalog"].names_in(kla), i
