"""The broker's server and APIs at the byte level: framing, versions, and Kafka's answer to each kind of bad input,
with the broker, the other connections and the stored data untouched afterwards (issue 4, items 2, 3 and 6)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from kafkalog import LogStore
from kafkalog.broker import Broker, protocol
from kafkalog.broker.api import ADVERTISED
from kafkalog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)

from .wire import Wire, batch

CONFIG = {"group.initial.rebalance.delay.ms": 0, "socket.request.max.bytes": 1 << 20,
          "message.max.bytes": 100_000}


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data", listen="127.0.0.1:0", config=dict(CONFIG, **{"auto.create.topics.enable": False}))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic(broker):
    with Wire(broker.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
    return "t"


def _healthy(broker, topic="t", expect=None):
    """A fresh connection still works and the stored records are exactly ``expect`` (values of partition 0)."""
    with Wire(broker.port) as w:
        r = w.fetch(topic, 0, 0)
        assert r["error_code"] == 0
        values = [rec.value for rec in _records(r["records"])]
        if expect is not None:
            assert values == expect
        return values


def _records(data):
    from kafkalog._engine.batch import iter_records
    return list(iter_records(bytes(data)))


# ---------------------------------------------------------------------------------------------------- versions

def test_api_versions_lists_exactly_the_matrix(broker):
    with Wire(broker.port) as w:
        for v in (0, 1, 2, 3, 4):
            resp = w.call(18, v, {"client_software_name": "t", "client_software_version": "1"})
            assert resp["error_code"] == 0
            got = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
            assert got == ADVERTISED
    # the matrix of the issue: Produce 0-13 (3-13 accepted; 12: transactions v2, 13: topic ids), Fetch 4-18 (13+: topic
    # ids), ...; flexible: Produce 9-13, Fetch 12-18, ApiVersions 3-5, ListOffsets 6-11 (v7: the
    # max-timestamp lookup of kafka-get-offsets --time -3), Metadata 9-13 (10+: topic ids), CreateTopics 5-7 (what was
    # made) and the admin APIs (issue 12), at the versions Kafka 4's clients and tools pick; transactions (issue 23):
    # OffsetFetch 7 (RequireStable), InitProducerId 2-5, AddPartitionsToTxn 3-5, AddOffsetsToTxn, EndTxn 3-5 and
    # TxnOffsetCommit 3-6 (transactions v2: KIP-890 part 2), DescribeProducers / DescribeTransactions /
    # ListTransactions; at Kafka 4.4's maxima (issue
    # 24): the classic group protocol (OffsetCommit 2-10, JoinGroup 0-9, Heartbeat 0-4, LeaveGroup 0-5, SyncGroup
    # 0-5), FindCoordinator 6, OffsetFetch 10, Metadata 13, ListOffsets 11, DeleteTopics 6, OffsetForLeaderEpoch 2-4,
    # ApiVersions 5; KIP-848's ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe 0-1; KIP-932's ShareGroupHeartbeat
    # 1, ShareGroupDescribe 1, ShareFetch 1-2, ShareAcknowledge 1-2, DescribeShareGroupOffsets 0-1,
    # AlterShareGroupOffsets 0, DeleteShareGroupOffsets 0
    assert ADVERTISED[0] == (0, 13) and ADVERTISED[1] == (4, 18) and ADVERTISED[18] == (0, 5)
    assert ADVERTISED[22] == (0, 5) and ADVERTISED[24] == (0, 5) and ADVERTISED[26] == (0, 5)
    assert ADVERTISED[28] == (0, 6) and ADVERTISED[8] == (2, 10) and ADVERTISED[23] == (2, 4)
    assert ADVERTISED[2] == (1, 11) and ADVERTISED[3] == (0, 13)
    assert ADVERTISED[9] == (1, 10) and ADVERTISED[10] == (0, 6) and ADVERTISED[20] == (1, 6)
    assert {k for k in ADVERTISED if protocol.is_flexible(k, ADVERTISED[k][1])} == {
        0, 1, 2, 3, 18, 19, 15, 16, 29, 30, 31, 32, 33, 35, 37, 42, 44, 50, 51, 60, 75,
        9, 10, 20, 22, 24, 25, 26, 27, 28, 61, 65, 66, 8, 11, 12, 13, 14, 68, 69,
        21, 23, 36, 48, 49, 43, 45, 46, 57,  # at Kafka 4.4's maxima: DeleteRecords 2, SaslAuthenticate 2, quotas 1
        76, 77, 78, 79, 90, 91, 92}  # KIP-932's share-group APIs, flexible from their first version


def test_api_versions_unknown_version_answers_v0_with_error_35(broker):
    with Wire(broker.port) as w:
        w.corr += 1
        # a v9 ApiVersions request: header v2 shape, body we do not know; the answer is a v0 body
        w.send_raw(_frame(struct.pack(">hhi", 18, 9, w.corr) + struct.pack(">h", 1) + b"x" + b"\x00" * 3))
        frame = w.recv_frame()
        corr, body = protocol.decode_response(18, 0, frame)
        assert corr == w.corr
        assert body["error_code"] == UnsupportedVersionError.code
        assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]} == {18: (0, 5)}
        # and the connection is still usable
        assert w.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == 0


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("key,version", [(0, 2), (0, 0), (1, 3), (1, 12), (3, 14), (11, 6), (77, 0)])
def test_unsupported_version_or_unknown_api_closes_the_connection(broker, topic, key, version):
    with Wire(broker.port) as other:
        assert other.produce(topic, 0, batch([b"kept"]))["error_code"] == 0
        with Wire(broker.port) as w:
            w.send_raw(_frame(struct.pack(">hhih", key, version, 7, 1) + b"x" + b"\x00" * 16))
            assert w.closed_by_peer()
        # the other connection and the data are untouched
        assert other.fetch(topic, 0, 0)["error_code"] == 0
    _healthy(broker, expect=[b"kept"])


# ---------------------------------------------------------------------------------------------------- framing

@pytest.mark.parametrize("payload", [
    b"",                                      # empty frame
    b"\x00",                                  # truncated header
    struct.pack(">hhi", 3, 4, 1),             # header without client id
    struct.pack(">hhih", 3, 4, 1, 50) + b"ab",  # client id longer than the frame
    struct.pack(">hhih", 0, 7, 1, -1) + b"\xff" * 3,  # Produce body cut short
    struct.pack(">hhih", 1, 11, 1, -1) + b"\x00" * 40,  # Fetch body of zeros, then garbage lengths
])
def test_garbage_frames_close_only_that_connection(broker, topic, payload):
    with Wire(broker.port) as w:
        assert w.produce(topic, 0, batch([b"a", b"b"]))["error_code"] == 0
    with Wire(broker.port) as bad:
        bad.send_raw(_frame(payload))
        assert bad.closed_by_peer()
    _healthy(broker, expect=[b"a", b"b"])


def test_frame_bigger_than_socket_request_max_bytes_is_refused_before_allocation(broker, topic):
    with Wire(broker.port) as w:
        # claims 2 GiB - 1; nothing else is sent: the broker must close at once, not wait to receive (or allocate) it
        w.send_raw(struct.pack(">i", 2**31 - 1))
        assert w.closed_by_peer()
    with Wire(broker.port) as w:
        w.send_raw(struct.pack(">i", -5))
        assert w.closed_by_peer()
    with Wire(broker.port) as w:
        w.send_raw(struct.pack(">i", (1 << 20) + 1) + b"\x00" * 100)
        assert w.closed_by_peer()
    _healthy(broker, expect=[])


def test_truncated_frame_then_disconnect_leaves_nothing_behind(broker, topic):
    good = protocol.encode_request(0, 7, 1, "c", {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
                                                  "topic_data": [{"name": topic, "partition_data": [
                                                      {"index": 0, "records": batch([b"half"])}]}]})
    s = socket.create_connection(("127.0.0.1", broker.port))
    s.sendall(good[:len(good) // 2])
    s.close()
    time.sleep(0.05)
    _healthy(broker, expect=[])


def test_pipelined_requests_are_answered_in_order(broker, topic):
    with Wire(broker.port) as w:
        corrs = []
        blob = b""
        for i in range(20):
            w.corr += 1
            corrs.append(w.corr)
            blob += protocol.encode_request(0, 7, w.corr, "c", {
                "transactional_id": None, "acks": 1, "timeout_ms": 1000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch([b"%d" % i])}]}]})
        w.send_raw(blob)  # all at once, in one segment where the kernel allows
        offsets = []
        for c in corrs:
            corr, body = protocol.decode_response(0, 7, w.recv_frame())
            assert corr == c
            offsets.append(body["responses"][0]["partition_responses"][0]["base_offset"])
        assert offsets == list(range(20))
    _healthy(broker, expect=[b"%d" % i for i in range(20)])


def test_large_produce_frame_received_directly(broker, topic):
    values = [bytes([i % 251]) * 1000 for i in range(90)]  # ~90 KB frame: bigger than the 64 KiB scratch buffer
    with Wire(broker.port) as w:
        r = w.produce(topic, 1, batch(values))
        assert r["error_code"] == 0 and r["base_offset"] == 0
        got = w.fetch(topic, 1, 0)
        assert [rec.value for rec in _records(got["records"])] == values


# ---------------------------------------------------------------------------------------------------- produce

def test_produce_wrong_crc_is_corrupt_message_and_appends_nothing(broker, topic):
    bad = bytearray(batch([b"x", b"y"]))
    bad[-1] ^= 0xFF  # a record byte: covered by the CRC
    with Wire(broker.port) as w:
        assert w.produce(topic, 0, batch([b"before"]))["error_code"] == 0
        r = w.produce(topic, 0, bytes(bad))
        assert r["error_code"] == CorruptRecordError.code
        assert w.produce(topic, 0, batch([b"after"]))["base_offset"] == 1
    _healthy(broker, expect=[b"before", b"after"])


def test_produce_over_max_message_bytes_is_message_too_large(broker, topic):
    with Wire(broker.port) as w:
        r = w.produce(topic, 0, batch([b"z" * 150_000]))
        assert r["error_code"] == RecordTooLargeError.code
        assert w.produce(topic, 0, batch([b"small"]))["error_code"] == 0
    _healthy(broker, expect=[b"small"])


def test_produce_unknown_topic_without_auto_create(broker, topic):
    with Wire(broker.port) as w:
        r = w.produce("nope", 0, batch([b"x"]))
        assert r["error_code"] == UnknownTopicOrPartitionError.code
        r = w.produce(topic, 9, batch([b"x"]))
        assert r["error_code"] == UnknownTopicOrPartitionError.code
        md = w.call(3, 4, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": True})
        assert md["topics"][0]["error_code"] == UnknownTopicOrPartitionError.code
    with LogStore(broker.data_dir, read_only=True) as store:
        assert "nope" not in store.topics()


def test_metadata_auto_creates_when_enabled(tmp_path):
    with Broker(tmp_path / "d", listen="127.0.0.1:0", config={"num.partitions": 3}) as b, Wire(b.port) as w:
        md = w.call(3, 4, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
        assert md["topics"][0]["error_code"] == 0
        assert [p["partition_index"] for p in md["topics"][0]["partitions"]] == [0, 1, 2]
        md = w.call(3, 4, {"topics": [{"name": "noauto"}], "allow_auto_topic_creation": False})
        assert md["topics"][0]["error_code"] == UnknownTopicOrPartitionError.code
        md = w.call(3, 4, {"topics": [{"name": "bad/name"}], "allow_auto_topic_creation": True})
        assert md["topics"][0]["error_code"] == 17
        assert md["brokers"] == [{"node_id": 1, "host": "127.0.0.1", "port": b.port, "rack": None}]


def test_acks_0_gets_no_response_and_a_failure_closes(broker, topic):
    with Wire(broker.port) as w:
        w.send(0, 7, {"transactional_id": None, "acks": 0, "timeout_ms": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch([b"fire"])}]}]})
        # the next request's answer is the next frame: nothing was sent for the acks=0 produce
        resp = w.call(18, 0, {})
        assert resp["error_code"] == 0
        w.send(0, 7, {"transactional_id": None, "acks": 0, "timeout_ms": 1000, "topic_data": [
            {"name": "missing", "partition_data": [{"index": 0, "records": batch([b"lost"])}]}]})
        assert w.closed_by_peer()
    _healthy(broker, expect=[b"fire"])


def test_produce_v3_to_v7_accepted_and_log_start_offset_answered(broker, topic):
    with Wire(broker.port) as w:
        for v in range(3, 8):
            r = w.produce(topic, 0, batch([b"v%d" % v]), version=v)
            assert r["error_code"] == 0 and r["base_offset"] == v - 3
            if v >= 5:
                assert r["log_start_offset"] == 0


# ---------------------------------------------------------------------------------------------------- idempotence

def test_idempotent_retry_is_not_appended_twice_and_gaps_are_out_of_order(broker, topic):
    with Wire(broker.port) as w:
        init = w.call(22, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert init["error_code"] == 0 and init["producer_id"] >= 0
        pid = init["producer_id"]
        b0 = batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
        assert w.produce(topic, 0, b0)["base_offset"] == 0
        # the same batch again (a retry after a lost response): the original offset, nothing appended
        again = w.produce(topic, 0, b0)
        assert (again["error_code"], again["base_offset"]) == (0, 0)
        b1 = batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2)
        assert w.produce(topic, 0, b1)["base_offset"] == 2
        gap = batch([b"e"], producer_id=pid, producer_epoch=0, base_sequence=5)
        assert w.produce(topic, 0, gap)["error_code"] == OutOfOrderSequenceNumberError.code
        # a new epoch starts again at sequence 0 (not 3); after it, the old epoch is fenced
        bad_epoch = batch([b"f"], producer_id=pid, producer_epoch=1, base_sequence=3)
        assert w.produce(topic, 0, bad_epoch)["error_code"] == OutOfOrderSequenceNumberError.code
        new_epoch = batch([b"d"], producer_id=pid, producer_epoch=1, base_sequence=0)
        assert w.produce(topic, 0, new_epoch)["base_offset"] == 3
        old = batch([b"g"], producer_id=pid, producer_epoch=0, base_sequence=3)
        assert w.produce(topic, 0, old)["error_code"] == InvalidProducerEpochError.code
        # producer ids are never handed out twice
        assert w.call(22, 0, {"transactional_id": None, "transaction_timeout_ms": 1})["producer_id"] != pid
    _healthy(broker, expect=[b"a", b"b", b"c", b"d"])


def test_idempotent_state_survives_a_restart(tmp_path):
    cfg = dict(CONFIG)
    b = Broker(tmp_path / "d", listen="127.0.0.1:0", config=cfg).start()
    port = b.port
    try:
        with Wire(b.port) as w:
            w.create_topic("t")
            pid = w.call(22, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})["producer_id"]
            b0 = batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=0)
            assert w.produce("t", 0, b0)["base_offset"] == 0
    finally:
        b.stop()
    b = Broker(tmp_path / "d", listen=f"127.0.0.1:{port}", config=cfg).start()
    try:
        with Wire(b.port) as w:
            assert w.produce("t", 0, b0)["base_offset"] == 0  # recognised as the retry it is
            assert w.produce("t", 0, batch([b"b"], producer_id=pid, producer_epoch=0,
                                           base_sequence=1))["base_offset"] == 1
            assert w.call(22, 1, {"transactional_id": None, "transaction_timeout_ms": 1})["producer_id"] > pid
        assert _healthy(b, expect=[b"a", b"b"])
    finally:
        b.stop()


# ---------------------------------------------------------------------------------------------------- fetch / offsets

def test_fetch_out_of_range_and_after_delete_records(broker, topic):
    with Wire(broker.port) as w:
        w.produce(topic, 0, batch([b"%d" % i for i in range(10)]))
        assert w.fetch(topic, 0, 11)["error_code"] == OffsetOutOfRangeError.code
        d = w.call(21, 1, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 4}]}],
                           "timeout_ms": 1000})
        assert d["topics"][0]["partitions"][0] == {"partition_index": 0, "low_watermark": 4, "error_code": 0}
        below = w.fetch(topic, 0, 2)
        assert below["error_code"] == OffsetOutOfRangeError.code
        ok = w.fetch(topic, 0, 4)
        assert ok["error_code"] == 0 and ok["log_start_offset"] == 4 and ok["high_watermark"] == 10
        # -1 = high watermark; above it: OFFSET_OUT_OF_RANGE and nothing changes
        d = w.call(21, 0, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 99}]}],
                           "timeout_ms": 1000})
        assert d["topics"][0]["partitions"][0]["error_code"] == OffsetOutOfRangeError.code
        d = w.call(21, 1, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}],
                           "timeout_ms": 1000})
        assert d["topics"][0]["partitions"][0]["low_watermark"] == 10
        lo = w.call(2, 3, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
        assert lo["topics"][0]["partitions"][0]["offset"] == 10


def test_list_offsets_time_search(broker, topic):
    with Wire(broker.port) as w:
        w.produce(topic, 0, batch([b"%d" % i for i in range(100)], base_ts=1_000_000))
        def lookup(ts, v=3):
            r = w.call(2, v, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}]})
            p = r["topics"][0]["partitions"][0]
            return p["error_code"], p["offset"], p["timestamp"]
        assert lookup(1_000_042) == (0, 42, 1_000_042)
        assert lookup(1_000_042, v=1) == (0, 42, 1_000_042)
        assert lookup(0) == (0, 0, 1_000_000)
        assert lookup(5_000_000) == (0, -1, -1)
        assert lookup(-1) == (0, 100, -1)
        assert lookup(-2) == (0, 0, -1)


def test_fetch_long_poll_is_woken_by_an_append(broker, topic):
    broker.services.other_writers_poll_s = 3600  # only the append's wake-up can end the wait early
    with Wire(broker.port) as waiter, Wire(broker.port) as producer:
        result = {}

        def poll():
            result["r"] = waiter.fetch(topic, 0, 0, max_wait_ms=30_000, min_bytes=1)
        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.2)
        assert t.is_alive()  # waiting: no data yet
        producer.produce(topic, 0, batch([b"wake"]))
        t.join(timeout=10)  # a timer-only poll would still be waiting for its 30 s
        assert not t.is_alive()
        assert [r.value for r in _records(result["r"]["records"])] == [b"wake"]


def test_fetch_long_poll_times_out_empty_and_answers_every_partition(broker, topic):
    with Wire(broker.port) as w:
        resp = w.call(1, 11, {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                  {"topic": topic, "partitions": [
                                      {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
                                       "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p in (0, 1)]},
                                  {"topic": "missing", "partitions": [
                                      {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                       "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
        got = [(t["topic"], p["partition_index"], p["error_code"]) for t in resp["responses"] for p in t["partitions"]]
        assert got == [(topic, 0, 0), (topic, 1, 0), ("missing", 0, UnknownTopicOrPartitionError.code)]


def test_fetch_response_budget_returns_at_least_one_batch(broker, topic):
    with Wire(broker.port) as w:
        for i in range(5):
            w.produce(topic, 0, batch([bytes([65 + i]) * 1000]))
        resp = w.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 10,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                  {"topic": topic, "partitions": [
                                      {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                       "log_start_offset": -1, "partition_max_bytes": 10}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
        recs = _records(resp["responses"][0]["partitions"][0]["records"])
        assert [r.value[:1] for r in recs] == [b"A"]  # KIP-74: one whole batch although it exceeds the limits


# ---------------------------------------------------------------------------------------------------- topics

def test_create_and_delete_topics_errors(broker):
    with Wire(broker.port) as w:
        assert w.create_topic("c1", 3, {"retention.ms": "1000"})["error_code"] == 0
        assert w.create_topic("c1", 1)["error_code"] == 36
        assert w.create_topic("bad name", 1)["error_code"] == 17
        assert w.create_topic("c2", 0)["error_code"] == 37
        assert w.create_topic("c3", 1, {"no.such.key": "1"})["error_code"] == 40
        r = w.call(19, 4, {"topics": [{"name": "c4", "num_partitions": 1, "replication_factor": 3,
                                       "assignments": [], "configs": []}], "timeout_ms": 1000,
                           "validate_only": False})
        assert r["topics"][0]["error_code"] == 38
        r = w.call(19, 4, {"topics": [{"name": "c5", "num_partitions": -1, "replication_factor": -1,
                                       "assignments": [], "configs": []}], "timeout_ms": 1000,
                           "validate_only": True})
        assert r["topics"][0]["error_code"] == 0
        r = w.call(20, 3, {"topic_names": ["c1", "never"], "timeout_ms": 1000})
        assert [(x["name"], x["error_code"]) for x in r["responses"]] == [("c1", 0), ("never", 3)]
    with LogStore(broker.data_dir, read_only=True) as store:
        assert "c1" not in store.topics() and "c5" not in store.topics()


# ---------------------------------------------------------------------------------------------------- lifecycle

def test_stop_writes_the_clean_shutdown_marker_and_restart_keeps_data(tmp_path):
    b = Broker(tmp_path / "d", listen="127.0.0.1:0", config=CONFIG).start()
    port = b.port
    with Wire(port) as w:
        w.create_topic("t")
        w.produce("t", 0, batch([b"durable"]))
    b.stop()
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()
    with Broker(tmp_path / "d", listen=f"127.0.0.1:{port}", config=CONFIG) as b2:
        assert not (tmp_path / "d" / ".kafka_cleanshutdown").exists()
        assert _healthy(b2, expect=[b"durable"])


def test_bad_listen_and_config_fail_clearly(tmp_path):
    from kafkalog.errors import InvalidConfigError
    with pytest.raises(InvalidConfigError, match="host:port"):
        Broker(tmp_path, listen="nonsense")
    with pytest.raises(InvalidConfigError, match="unknown config key"):
        Broker(tmp_path, listen="127.0.0.1:0", config={"no.such.broker.key": 1})
    with pytest.raises(InvalidConfigError, match="SSL"):
        Broker(tmp_path, listen="SSL://127.0.0.1:0")
    with Broker(tmp_path / "a", listen="127.0.0.1:0") as b, pytest.raises(OSError):
        Broker(tmp_path / "b", listen=f"127.0.0.1:{b.port}").start()


def test_log_append_time_topic_answers_the_append_time(broker):
    with Wire(broker.port) as w:
        assert w.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})["error_code"] == 0
        before = int(time.time() * 1000)
        r = w.produce("lat", 0, batch([b"x", b"y"], base_ts=1))
        after = int(time.time() * 1000)
        assert r["error_code"] == 0 and before <= r["log_append_time_ms"] <= after
        recs = _records(w.fetch("lat", 0, 0)["records"])
        assert [rec.timestamp for rec in recs] == [r["log_append_time_ms"]] * 2


def test_idle_connections_are_closed_after_connections_max_idle_ms(tmp_path):
    with Broker(tmp_path / "d", listen="127.0.0.1:0", config={"connections.max.idle.ms": 300}) as b:
        with Wire(b.port) as idle, Wire(b.port, timeout=30) as busy:
            assert idle.call(18, 0, {})["error_code"] == 0
            for _ in range(12):  # keeps talking past the idle limit: stays open
                assert busy.call(18, 0, {})["error_code"] == 0
                time.sleep(0.1)
            assert idle.closed_by_peer()
            assert busy.call(18, 0, {})["error_code"] == 0


def test_prometheus_metrics(tmp_path):
    import urllib.request
    with Broker(tmp_path / "d", listen="127.0.0.1:0", metrics="127.0.0.1:0",
                config={"quota.producer.default": "1M"}) as b:
        with Wire(b.port, client_id="app") as w:
            w.create_topic("m", 2)
            w.produce("m", 1, batch([b"a", b"b", b"c"]))
            w.fetch("m", 1, 0)
            w.send_raw(_frame(b"\x00\x07garbage"))
            assert w.closed_by_peer()
        text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
        lines = {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                 if ln and not ln.startswith("#")}
        assert lines['kafkalog_requests_total{api="Produce"}'] == 1
        assert lines['kafkalog_requests_total{api="Fetch"}'] == 1
        assert lines['kafkalog_request_latency_seconds_count{api="Produce"}'] == 1
        assert lines['kafkalog_log_end_offset{partition="1",topic="m"}'] == 3
        assert lines['kafkalog_log_start_offset{partition="1",topic="m"}'] == 0
        assert lines['kafkalog_log_size_bytes{partition="1",topic="m"}'] > 0
        assert lines['kafkalog_quota_limit_bytes_per_second{client_id="app",quota="producer_byte_rate"}'] == 1 << 20
        assert lines['kafkalog_quota_byte_rate{client_id="app",quota="producer_byte_rate"}'] > 0
        assert lines["kafkalog_network_bytes_in_total"] > 0 and lines["kafkalog_network_bytes_out_total"] > 0
        assert sum(v for k, v in lines.items() if k.startswith("kafkalog_request_errors_total")) == 1
        assert "kafkalog_fetch_sessions" in text


def test_a_handler_whose_connection_closed_before_it_ran_leaves_no_unretrieved_worker_error():
    """A sliced handler's first step (a worker thread's future) is made before its coroutine runs; when the
    connection closes first, the coroutine is cancelled unstarted and nothing awaits the future. Its error must not
    surface as "Future exception was never retrieved" (the fuzzer's million-frame run logged two)."""
    import asyncio
    import gc

    from kafkalog.broker.api import run_sliced

    logged = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: logged.append(context.get("message")))

        def failing():
            raise OSError("the topic went away")

        def handler():
            yield loop.run_in_executor(None, failing)
            return b"answer"

        task = asyncio.ensure_future(run_sliced(handler()))
        task.cancel()  # the connection closed before the handler's coroutine ran
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.2)  # the worker finishes with its error
    asyncio.run(main())
    gc.collect()
    assert not [m for m in logged if m and "never retrieved" in m], logged
