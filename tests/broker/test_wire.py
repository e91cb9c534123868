"""The Cython hot path (kafkalog.broker._wire) against the table codec (byte equality, same errors), real clients'
parsers on our responses, and real Produce v7 frames captured from kafka-python and aiokafka."""

import asyncio
import io
import struct
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog._engine.batch import build_batch
from kafkalog.broker import _wire, protocol, schemas
from kafkalog.errors import InvalidRequestError, UnsupportedVersionError

I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(max_size=12)
RECORDS = st.one_of(st.none(), st.binary(max_size=64))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _records_value(records):
    return None if records is None else records.tobytes()


# ---------------------------------------------------------------------------------------------------------------------
# Produce request

def produce_request(version, transactional_id, acks, timeout_ms, topics, client_id="c"):
    key = "topic_id" if version >= 13 else "name"  # v13+: topics by id (a uuid.UUID in ``topics``)
    body = {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms, "topic_data": [
        {key: name, "partition_data": [{"index": p, "records": r} for p, r in parts]} for name, parts in topics]}
    return protocol.encode_request(0, version, 7, client_id, body)[4:]


def _by_id(topics, version):
    """Produce v13+ names topics by id: each name stands for the id made from it."""
    if version < 13:
        return topics
    return [(uuid.uuid5(uuid.NAMESPACE_URL, n), parts) for n, parts in topics]


def table_produce(frame, offset, version):
    d = protocol.decode_request(0, version, frame, offset)
    return (d["transactional_id"], d["acks"], d["timeout_ms"],
            [(t["topic_id"] if version >= 13 else t["name"],
              [(p["index"], _records_value(p["records"])) for p in t["partition_data"]])
             for t in d["topic_data"]])


def wire_produce(frame, offset, version):
    txn, acks, timeout_ms, topics = _wire.parse_produce(frame, offset, version)
    return txn, acks, timeout_ms, [(n, [(p, _records_value(r)) for p, r in parts]) for n, parts in topics]


PRODUCE_TOPICS = st.lists(st.tuples(NAMES, st.lists(st.tuples(I32, RECORDS), max_size=4)), max_size=4)


@SETTINGS
@given(version=st.integers(3, 13), txn=st.one_of(st.none(), NAMES), acks=I16, timeout_ms=I32, topics=PRODUCE_TOPICS)
def test_parse_produce_equals_table_codec(version, txn, acks, timeout_ms, topics):
    topics = _by_id(topics, version)
    frame = produce_request(version, txn, acks, timeout_ms, topics)
    _, offset = protocol.read_request_header(frame)
    assert wire_produce(frame, offset, version) == table_produce(frame, offset, version) == (
        txn, acks, timeout_ms, [(n, list(parts)) for n, parts in topics])


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_parse_produce_records_are_views_of_the_frame(kind):
    batch = build_batch([b"v1", b"v2"])
    raw = produce_request(7, None, -1, 1000, [("t", [(0, batch), (1, None), (2, b"")])])
    frame = kind(raw) if kind is not memoryview else memoryview(bytearray(raw))
    _, offset = protocol.read_request_header(frame)
    txn, acks, timeout_ms, topics = _wire.parse_produce(frame, offset, 7)
    (name, parts), = topics
    assert (txn, acks, timeout_ms, name) == (None, -1, 1000, "t")
    (p0, r0), (p1, r1), (p2, r2) = parts
    assert (p0, p1, p2) == (0, 1, 2) and r1 is None and r2.tobytes() == b""
    assert isinstance(r0, memoryview) and r0.tobytes() == bytes(batch)
    owner = frame.obj if isinstance(frame, memoryview) else frame
    assert r0.obj is owner
    if kind is not bytes:
        owner[-(len(batch) + 8)] ^= 0xFF  # a byte inside partition 0's batch: the view sees it
        assert r0.tobytes() != bytes(batch)


def _same_outcome(fast, slow, *args):
    """fast(*args) and slow(*args) both return the same value or both raise the same InvalidRequestError."""
    try:
        expected = slow(*args)
    except InvalidRequestError as exc:
        with pytest.raises(InvalidRequestError) as info:
            fast(*args)
        assert str(info.value) == str(exc)
        return False
    assert fast(*args) == expected
    return True


def table_fetch(frame, offset, version):
    return fetch_fields(protocol.decode_request(1, version, frame, offset), version)


# what the hot path's parse_fetch returns besides the version's own fields (their defaults): what the broker reads of
# every version
_FETCH_ALWAYS = {"session_id", "session_epoch", "forgotten_topics_data", "rack_id", "current_leader_epoch",
                 "log_start_offset"}


def fetch_fields(decoded, version, rows=None):
    """The table codec's FetchRequest dict cut to the fields ``version`` carries (no tagged field, none of another
    version), plus _FETCH_ALWAYS: what _wire.parse_fetch returns."""
    rows = schemas.FETCH["request"] if rows is None else rows
    out = {}
    for row in rows:
        name, _typ, versions, opts = row[:4]
        sub = row[4] if len(row) > 4 else None
        present = protocol._in(versions, version) and not ("tag" in opts and protocol._in(opts.get("tagged"),
                                                                                               version))
        if not present and name not in _FETCH_ALWAYS:
            continue
        value = decoded[name]
        if sub is not None and isinstance(value, list):
            value = [fetch_fields(x, version, sub) for x in value]
        out[name] = value
    return out


@pytest.mark.parametrize("version", [7, 8, 9, 11, 12, 13])
def test_parse_produce_truncated_at_every_byte_same_error_as_table_codec(version):
    frame = produce_request(version, "txn-ü", 1, 30000, _by_id([("a", [(0, b"x" * 30), (1, None)]),
                                                                ("bb", [(5, b"yz")])], version))
    _, offset = protocol.read_request_header(frame)
    for cut in range(offset, len(frame)):
        short = frame[:cut]
        assert not _same_outcome(wire_produce, table_produce, short, offset, version)
    if version < 9:
        with pytest.raises(InvalidRequestError, match="trailing"):
            _wire.parse_produce(frame + b"\x00", offset, version)
    else:  # flexible: bytes after the last tag buffer are ignored, as Kafka ignores them
        assert wire_produce(frame + b"\x00", offset, version) == table_produce(frame, offset, version)
    with pytest.raises(InvalidRequestError):
        _wire.parse_produce(frame, len(frame) + 1, version)
    for unsupported in (2, 14):
        with pytest.raises(UnsupportedVersionError):
            _wire.parse_produce(frame, offset, unsupported)


@pytest.mark.parametrize(("patch", "match"), [
    ((-4, struct.pack(">i", 100)), "records length 100 past the end"),
    ((-4, struct.pack(">i", -3)), "negative records length -3"),
    ((-12, struct.pack(">i", -1)), "negative array length -1"),
    ((-12, struct.pack(">i", 2**31 - 1)), "array length .* past the end"),
])
def test_parse_produce_bad_lengths(patch, match):
    frame = bytearray(produce_request(3, None, 1, 5, [("t", [(9, b"")])]))
    pos, value = patch
    frame[len(frame) + pos:len(frame) + pos + 4] = value
    _, offset = protocol.read_request_header(frame)
    with pytest.raises(InvalidRequestError, match="Produce v3 request: field topic_data.*" + match):
        _wire.parse_produce(bytes(frame), offset, 3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.integers(0, 4), version=st.sampled_from([7, 9, 11]))
def test_parse_produce_fuzz_same_as_table_codec(edits, cut, version):
    frame = bytearray(produce_request(version, "t", 1, 5, [("ab", [(0, b"x" * 20), (1, None)]), ("c", [(2, b"q")])]))
    _, offset = protocol.read_request_header(frame)
    for pos, value in edits:
        frame[offset + pos % (len(frame) - offset)] = value
    frame = bytes(frame[: len(frame) - cut])
    _same_outcome(wire_produce, table_produce, frame, offset, version)


# ---------------------------------------------------------------------------------------------------------------------
# Produce response

RECORD_ERRORS = st.lists(st.tuples(I32, st.one_of(st.none(), NAMES)), max_size=3)
PRODUCE_RESULTS = st.lists(st.tuples(NAMES, st.lists(st.one_of(
    st.tuples(I32, I16, I64, I64, I64),
    st.tuples(I32, I16, I64, I64, I64, RECORD_ERRORS, st.one_of(st.none(), NAMES))), max_size=4)), max_size=4)


def table_produce_response(version, correlation_id, topics, throttle_time_ms):
    key = "topic_id" if version >= 13 else "name"
    body = {"responses": [{key: n, "partition_responses": [
        {"index": p, "error_code": e, "base_offset": b, "log_append_time_ms": t, "log_start_offset": s,
         "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in (rest[0] if rest else [])],
         "error_message": rest[1] if rest else None}
        for p, e, b, t, s, *rest in parts]} for n, parts in topics], "throttle_time_ms": throttle_time_ms}
    return b"".join(protocol.encode_response(0, version, correlation_id, body))


@SETTINGS
@given(version=st.integers(3, 13), correlation_id=I32, topics=PRODUCE_RESULTS, throttle=I32)
def test_encode_produce_response_equals_table_codec(version, correlation_id, topics, throttle):
    topics = _by_id(topics, version)
    out = _wire.encode_produce_response(version, correlation_id, topics, throttle)
    assert isinstance(out, bytes)
    assert out == table_produce_response(version, correlation_id, topics, throttle)


def test_encode_produce_response_bad_values():
    with pytest.raises(UnsupportedVersionError):
        _wire.encode_produce_response(14, 1, [], 0)
    with pytest.raises(ValueError, match="Produce v7 response"):
        _wire.encode_produce_response(7, 1, [("t", [(2**31, 0, 0, 0, 0)])], 0)
    with pytest.raises(ValueError, match="str"):
        _wire.encode_produce_response(7, 1, [(b"t", [])], 0)
    with pytest.raises(ValueError):
        _wire.encode_produce_response(7, 1, [("t", [(1, 0, 0, 0)])], 0)
    with pytest.raises(ValueError, match="str or None"):
        _wire.encode_produce_response(9, 1, [("t", [(1, 0, 0, 0, 0, [(0, b"m")], None)])], 0)


# ---------------------------------------------------------------------------------------------------------------------
# Fetch response

BUFFERS = st.lists(st.one_of(st.binary(max_size=40), st.binary(max_size=40).map(memoryview),
                             st.binary(max_size=40).map(bytearray)), max_size=3)
FETCH_TOPICS = st.lists(st.tuples(NAMES, st.lists(st.tuples(I32, I16, I64, I64, I64, st.one_of(st.none(), BUFFERS)),
                                                  max_size=4)), max_size=4)


def topic_key(version, name):
    """A topic as the hot path takes it: its name before v13, an id (derived from the name) from v13."""
    return uuid.uuid5(uuid.NAMESPACE_DNS, name) if version >= 13 else name


def table_fetch_response(version, correlation_id, throttle, error_code, session_id, topics):
    body = {"throttle_time_ms": throttle, "error_code": error_code, "session_id": session_id, "responses": [
        {"topic": n if version < 13 else "", "topic_id": topic_key(version, n) if version >= 13 else uuid.UUID(int=0),
         "partitions": [
            {"partition_index": p, "error_code": e, "high_watermark": h, "last_stable_offset": ls,
             "log_start_offset": lso, "aborted_transactions": [], "preferred_read_replica": -1, "records": r}
            for p, e, h, ls, lso, r in parts]} for n, parts in topics]}
    return protocol.encode_response(1, version, correlation_id, body)


@SETTINGS
@given(version=st.integers(4, 18), correlation_id=I32, throttle=I32, error_code=I16, session_id=I32,
       topics=FETCH_TOPICS)
def test_encode_fetch_response_equals_table_codec(version, correlation_id, throttle, error_code, session_id, topics):
    keyed = [(topic_key(version, n), parts) for n, parts in topics]
    chunks = _wire.encode_fetch_response(version, correlation_id, throttle, error_code, session_id, keyed)
    table = table_fetch_response(version, correlation_id, throttle, error_code, session_id, topics)
    joined = b"".join(chunks)
    assert joined == b"".join(table)
    assert struct.unpack_from(">i", joined)[0] == len(joined) - 4
    # every non-empty record buffer is handed over as itself, in order
    given_buffers = [b for _, parts in topics for *_, r in parts if r for b in r if len(memoryview(b).cast("B"))]
    ids = {id(b) for b in given_buffers}
    assert [c for c in chunks if id(c) in ids] == given_buffers


def test_encode_fetch_response_chunks_and_sizes():
    big = memoryview(bytearray(b"B" * 65536))
    small = b"s" * 10
    chunks = _wire.encode_fetch_response(11, 9, 0, 0, 123, [("t", [(0, 0, 10, 10, 0, [big, small]),
                                                                   (1, 0, 0, 0, 0, []), (2, 3, -1, -1, -1, None)])])
    assert chunks[1] is big and chunks[2] is small and len(chunks) == 4
    assert struct.unpack_from(">i", chunks[0])[0] == sum(memoryview(c).nbytes for c in chunks) - 4
    # a single buffer instead of a list is accepted too
    one = _wire.encode_fetch_response(4, 9, 0, 0, 0, [("t", [(0, 0, 1, 1, 0, small)])])
    assert one[1] is small
    with pytest.raises(UnsupportedVersionError):
        _wire.encode_fetch_response(19, 1, 0, 0, 0, [])
    with pytest.raises(ValueError, match="uuid"):
        _wire.encode_fetch_response(13, 1, 0, 0, 0, [("t", [])])
    with pytest.raises(ValueError, match="str"):
        _wire.encode_fetch_response(12, 1, 0, 0, 0, [(uuid.uuid4(), [])])
    with pytest.raises(ValueError, match="Fetch v11 response"):
        _wire.encode_fetch_response(11, 1, 0, 0, 0, [("t", [(0, 2**15, 0, 0, 0, None)])])
    with pytest.raises(ValueError, match="bytes-like"):
        _wire.encode_fetch_response(11, 1, 0, 0, 0, [("t", [(0, 0, 0, 0, 0, [object()])])])


# ---------------------------------------------------------------------------------------------------------------------
# Fetch request

UUIDS = st.uuids()
FETCH_PARTS = st.lists(st.fixed_dictionaries({"partition": I32, "current_leader_epoch": I32, "fetch_offset": I64,
                                              "last_fetched_epoch": I32, "log_start_offset": I64,
                                              "partition_max_bytes": I32}), max_size=3)
FETCH_REQUEST = st.fixed_dictionaries({
    "replica_id": I32, "max_wait_ms": I32, "min_bytes": I32, "max_bytes": I32, "isolation_level": st.integers(0, 1),
    "session_id": I32, "session_epoch": I32,
    "topics": st.lists(st.fixed_dictionaries({"topic": NAMES, "topic_id": UUIDS, "partitions": FETCH_PARTS}),
                       max_size=3),
    "forgotten_topics_data": st.lists(st.fixed_dictionaries({"topic": NAMES, "topic_id": UUIDS,
                                                             "partitions": st.lists(I32, max_size=3)}), max_size=2),
    "rack_id": NAMES})


def _with_tags(frame: bytes, version: int) -> bytes:
    """A flexible Fetch request whose top-level tag buffer carries what a follower would send (cluster id, replica
    state): the frame's last byte is its empty tag buffer."""
    if version < 12:
        return frame
    tags = b"\x02" + b"\x00\x04\x03abc" + b"\x01\x0c" + struct.pack(">iq", 3, 77)
    return frame[:-1] + tags


@SETTINGS
@given(version=st.integers(4, 18), body=FETCH_REQUEST)
def test_parse_fetch_equals_table_codec(version, body):
    frame = protocol.encode_request(1, version, 3, "consumer", body)[4:]
    _, offset = protocol.read_request_header(frame)
    assert _wire.parse_fetch(frame, offset, version) == table_fetch(frame, offset, version)
    tagged = _with_tags(frame, version)
    assert _wire.parse_fetch(tagged, offset, version) == table_fetch(tagged, offset, version)
    # the version's own fields, each with the value sent
    got = _wire.parse_fetch(frame, offset, version)
    topic_key = "topic_id" if version >= 13 else "topic"
    assert [t[topic_key] for t in got["topics"]] == [t[topic_key] for t in body["topics"]]
    assert [p["fetch_offset"] for t in got["topics"] for p in t["partitions"]] == [
        p["fetch_offset"] for t in body["topics"] for p in t["partitions"]]


def test_parse_fetch_truncated_and_fuzzed_same_error_as_table_codec():
    body = {"max_wait_ms": 500, "min_bytes": 1, "session_epoch": 3, "topics": [
        {"topic": "tø", "topic_id": uuid.UUID(int=5), "partitions": [
            {"partition": 0, "fetch_offset": 9, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [{"topic": "x", "topic_id": uuid.UUID(int=6), "partitions": [1, 2]}],
            "rack_id": "r1"}
    for version in (4, 7, 11, 12, 13, 17):
        frame = _with_tags(protocol.encode_request(1, version, 3, "c", body)[4:], version)
        _, offset = protocol.read_request_header(frame)
        assert _wire.parse_fetch(frame, offset, version)["topics"][0]["partitions"][0]["fetch_offset"] == 9
        for cut in range(offset, len(frame)):
            short = frame[:cut]
            assert not _same_outcome(_wire.parse_fetch, table_fetch, short, offset, version)
        for pos in range(offset, len(frame)):
            for value in (0x00, 0x7F, 0xFF):
                bad = bytearray(frame)
                bad[pos] = value
                bad = bytes(bad)
                _same_outcome(_wire.parse_fetch, table_fetch, bad, offset, version)


# ---------------------------------------------------------------------------------------------------------------------
# real clients' parsers on our responses

def test_kafka_python_and_aiokafka_parse_our_produce_response():
    from aiokafka.protocol.produce import ProduceResponse_v7
    from kafka.protocol.producer.produce import ProduceResponse

    out = _wire.encode_produce_response(7, 42, [("tøpic", [(0, 0, 100, -1, 7), (1, 6, -1, -1, -1)])], 25)
    body = out[8:]
    kp = ProduceResponse.decode(body, version=7)
    assert kp.throttle_time_ms == 25
    (topic,) = kp.responses
    assert topic.name == "tøpic"
    assert [(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
            for p in topic.partition_responses] == [(0, 0, 100, -1, 7), (1, 6, -1, -1, -1)]
    aio = ProduceResponse_v7.decode(io.BytesIO(body))
    assert aio.topics == [("tøpic", [(0, 0, 100, -1, 7), (1, 6, -1, -1, -1)])] and aio.throttle_time_ms == 25


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 17])
def test_kafka_python_and_aiokafka_parse_our_fetch_response_and_its_batches(version):
    from aiokafka.protocol import fetch as aio_fetch
    from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
    from kafka.protocol.consumer.fetch import FetchResponse as KpFetchResponse
    from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

    b1 = build_batch([b"a", b"b"], base_offset=0)
    b2 = build_batch([b"c"], keys=[b"k"], base_offset=2)
    tid = uuid.uuid4()
    chunks = _wire.encode_fetch_response(version, 5, 0, 0, 0, [
        (tid if version >= 13 else "t", [(0, 0, 3, 3, 0, [memoryview(b1), memoryview(b2)]), (1, 1, -1, -1, -1, None)])])
    body = b"".join(chunks)[8 + (version >= 12):]  # size, correlation id (and the header's tag buffer)

    kp = KpFetchResponse.decode(body, version=version)
    (topic,) = kp.responses
    p0, p1 = topic.partitions
    name = topic.topic if version < 13 else str(uuid.UUID(bytes=bytes(topic.topic_id.bytes)) if hasattr(
        topic.topic_id, "bytes") else topic.topic_id)
    assert (name, p0.partition_index, p0.high_watermark, p1.error_code) == ("t" if version < 13 else str(tid), 0, 3, 1)
    assert list(p0.aborted_transactions) == []
    values = []
    records = KpMemoryRecords(bytes(p0.records))
    while (batch := records.next_batch()) is not None:
        values += [(r.offset, r.key, r.value) for r in batch]
    assert values == [(0, None, b"a"), (1, None, b"b"), (2, b"k", b"c")]
    if version > 11:
        return  # aiokafka speaks Fetch up to v11

    aio = getattr(aio_fetch, f"FetchResponse_v{version}").decode(io.BytesIO(body))
    (name, parts), = aio.topics
    assert name == "t" and parts[0][0] == 0 and parts[0][2] == 3
    records = AioMemoryRecords(bytes(parts[0][-1]))
    values = []
    while (batch := records.next_batch()) is not None:
        values += [(r.offset, r.key, r.value) for r in batch]
    assert values == [(0, None, b"a"), (1, None, b"b"), (2, b"k", b"c")]


def test_kio_parses_our_hot_path_responses():
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    batch = build_batch([b"x" * 100])
    tid = uuid.uuid4()
    for version in range(4, 18):
        topic = tid if version >= 13 else "t"
        data = b"".join(_wire.encode_fetch_response(version, 1, 2, 0, 3, [(topic, [(0, 0, 1, 1, 0, [batch])])]))
        cls = load_response_schema(1, version)
        obj, end = entity_reader(cls)(data[8 + (version >= 12):], 0)
        assert end == len(data) - 8 - (version >= 12)
        assert obj.responses[0].partitions[0].records == bytes(batch)
        if version >= 13:
            assert str(obj.responses[0].topic_id) == str(tid)
    for version in range(3, 13):
        data = _wire.encode_produce_response(version, 1, [("t", [(0, 87, -1, -1, 2, [(1, "no key")], "why")])], 0)
        obj, end = entity_reader(load_response_schema(0, version))(data[8 + (version >= 9):], 0)
        assert end == len(data) - 8 - (version >= 9)
        p = obj.responses[0].partition_responses[0]
        assert p.error_code == 87 and (version < 5 or p.log_start_offset == 2)
        if version >= 8:
            assert p.error_message == "why" and p.record_errors[0].batch_index == 1


# ---------------------------------------------------------------------------------------------------------------------
# real Produce frames from kafka-python and aiokafka

class CaptureBroker:
    """A loopback broker that speaks just enough (ApiVersions, Metadata, Produce) through our codec and keeps every
    Produce frame. Runs its own event loop in a thread."""

    TOPIC = "wire-capture"

    def __init__(self):
        self.frames = []
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def close(self):
        async def stop():
            self.server.close()
            await self.server.wait_closed()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    def _answer(self, header, frame, offset):
        key, version, corr = header.api_key, header.api_version, header.correlation_id
        if key == 18:
            if version > 4:
                return protocol.encode_response(18, 0, corr, {"error_code": 35, "api_keys": [
                    {"api_key": 18, "min_version": 0, "max_version": 4}]})
            return protocol.encode_response(18, version, corr, {"api_keys": [
                {"api_key": k, "min_version": 0 if k == 0 else lo, "max_version": hi}
                for k, (lo, hi) in protocol.SUPPORTED.items()]})
        if key == 3:
            return protocol.encode_response(3, version, corr, {
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}], "cluster_id": "capture",
                "controller_id": 0, "topics": [{"name": self.TOPIC, "partitions": [
                    {"partition_index": 0, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}]}]})
        if key == 0:
            self.frames.append((version, bytes(frame), offset))
            _, acks, _, topics = _wire.parse_produce(frame, offset, version)
            if acks == 0:
                return []
            return [_wire.encode_produce_response(version, corr, [
                (name, [(p, 0, len(self.frames) - 1, -1, 0) for p, _ in parts]) for name, parts in topics], 0)]
        raise ConnectionError(f"capture broker does not speak {protocol.API_NAMES.get(key, key)}")

    async def _serve(self, reader, writer):
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, offset = protocol.read_request_header(frame)
                writer.writelines(self._answer(header, frame, offset))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def capture():
    broker = CaptureBroker()
    yield broker
    broker.close()


def _values_in(records):
    from kafka.record.memory_records import MemoryRecords
    out = []
    mr = MemoryRecords(records.tobytes())
    while (batch := mr.next_batch()) is not None:
        assert batch.magic == 2 and batch.validate_crc()
        out += [(r.key, r.value) for r in batch]
    return out


def _check_captured(frames, expected, expected_version):
    assert frames
    got = []
    for version, frame, offset in frames:
        assert version == expected_version
        _, _, _, topics = _wire.parse_produce(frame, offset, version)
        table = protocol.decode_request(0, version, frame, offset)
        for (name, parts), t in zip(topics, table["topic_data"]):
            assert name == CaptureBroker.TOPIC
            for (p, records), tp in zip(parts, t["partition_data"]):
                assert p == 0 and records.tobytes() == tp["records"].tobytes()
                # the frame's own tail bytes (flexible versions end with three empty tag buffers after them)
                tags = 3 if version >= 9 else 0
                assert frame.find(records.tobytes()) == len(frame) - records.nbytes - tags
                got += _values_in(records)
    assert got == expected


def test_real_produce_v9_frames_from_kafka_python(capture):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{capture.port}", acks=1, linger_ms=0,
                             request_timeout_ms=5000, max_block_ms=10000)
    try:
        for i in range(3):
            producer.send(CaptureBroker.TOPIC, key=b"k%d" % i, value=b"value-%d" % i, partition=0).get(timeout=10)
    finally:
        producer.close(timeout=5)
    # kafka-python 3.0.12 sends Produce up to v9 (flexible)
    _check_captured(capture.frames, [(b"k%d" % i, b"value-%d" % i) for i in range(3)], 9)


def test_real_produce_v7_frames_from_aiokafka(capture):
    from aiokafka import AIOKafkaProducer

    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{capture.port}", acks=1, request_timeout_ms=5000)
        await asyncio.wait_for(producer.start(), 10)
        try:
            for i in range(3):
                await asyncio.wait_for(producer.send_and_wait(CaptureBroker.TOPIC, b"aio-%d" % i, partition=0), 10)
        finally:
            await asyncio.wait_for(producer.stop(), 10)

    asyncio.run(produce())
    _check_captured(capture.frames, [(None, b"aio-%d" % i) for i in range(3)], 7)
