"""Transactions on the wire (KIP-98, KIP-447): the coordinator's APIs and error codes in raw frames (``Wire``), and
librdkafka's transactional producer with read_committed consumers end to end. The same workloads against Apache
Kafka 4.4 itself are compared field by field in tests/compat/test_transactions.py; crashes in
tests/broker/test_transactions_crash.py.
"""

from __future__ import annotations

import uuid

import pytest

from kafkalog.broker import Broker

from .wire import Wire, batch

NONE, UNKNOWN_TOPIC = 0, 3
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT = 47, 48, 49, 50
CONCURRENT_TRANSACTIONS, OPERATION_NOT_ATTEMPTED, UNSTABLE_OFFSET_COMMIT, PRODUCER_FENCED = 51, 55, 88, 90
TRANSACTIONAL_ID_NOT_FOUND = 105


def _init(w: Wire, txn: str, timeout_ms: int = 60000, version: int = 4, pid: int = -1, epoch: int = -1) -> dict:
    return w.call(22, version, {"transactional_id": txn, "transaction_timeout_ms": timeout_ms, "producer_id": pid,
                                "producer_epoch": epoch})


def _add(w: Wire, txn: str, pid: int, epoch: int, parts: dict, version: int = 3) -> dict:
    r = w.call(24, version, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                             "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                                 {"name": t, "partitions": ps} for t, ps in parts.items()]})
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def _end(w: Wire, txn: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return w.call(26, version, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                                "committed": commit})["error_code"]


def _produce(w: Wire, txn: str | None, topic: str, partition: int, records: bytes) -> int:
    r = w.call(0, 7, {"transactional_id": txn, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return r["responses"][0]["partition_responses"][0]


def _fetch(w: Wire, topic: str, offset: int = 0, isolation: int = 1) -> dict:
    resp = w.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                          "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "topics": [
                              {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                               "fetch_offset": offset, "log_start_offset": -1,
                                                               "partition_max_bytes": 1 << 20}]}],
                          "forgotten_topics_data": [], "rack_id": ""})
    return resp["responses"][0]["partitions"][0]


def _latest(w: Wire, topic: str, isolation: int) -> int:
    r = w.call(2, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return r["topics"][0]["partitions"][0]["offset"]


def _txn_batch(values, pid: int, epoch: int, seq: int = 0) -> bytes:
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


@pytest.fixture
def wire_broker(tmp_path):
    b = Broker(tmp_path / "data", listen="127.0.0.1:0",
               config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
                       "transaction.max.timeout.ms": 300000})
    b.start()
    yield b
    b.stop()


def test_commit_abort_lso_and_aborted_transactions_on_the_wire(wire_broker):
    t, txn = "t-" + uuid.uuid4().hex[:6], "tx-" + uuid.uuid4().hex[:6]
    with Wire(wire_broker.port) as w:
        assert w.create_topic(t)["error_code"] == 0
        r = _init(w, txn)
        assert r["error_code"] == 0 and r["producer_epoch"] == 0, r
        pid, epoch = r["producer_id"], r["producer_epoch"]
        # a transactional batch for a partition not added to the transaction: refused (KIP-890 part 1)
        assert _produce(w, txn, t, 0, _txn_batch([b"x"], pid, epoch))["error_code"] == INVALID_TXN_STATE
        assert _add(w, txn, pid, epoch, {t: [0]}) == {(t, 0): NONE}
        assert _produce(w, txn, t, 0, _txn_batch([b"c0", b"c1"], pid, epoch))["base_offset"] == 0
        # open: read_committed sees nothing, LSO 0; read_uncommitted sees the records
        f = _fetch(w, t)
        assert (f["high_watermark"], f["last_stable_offset"], f["records"] or b"") == (2, 0, b""), f
        assert _latest(w, t, 1) == 0 and _latest(w, t, 0) == 2
        assert _end(w, txn, pid, epoch, True) == NONE
        assert _end(w, txn, pid, epoch, True) == NONE  # a retry of a completed commit
        assert _end(w, txn, pid, epoch, False) == INVALID_TXN_STATE  # the opposite result after it
        assert _latest(w, t, 1) == 3  # the COMMIT marker took offset 2
        # an aborted transaction: its records come with the AbortedTransactions entry
        assert _add(w, txn, pid, epoch, {t: [0]}) == {(t, 0): NONE}
        assert _produce(w, txn, t, 0, _txn_batch([b"a0"], pid, epoch, seq=2))["base_offset"] == 3
        assert _end(w, txn, pid, epoch, False) == NONE
        f = _fetch(w, t, offset=3)  # (a read from 0 may end at a segment's end: the batches' old timestamps roll)
        assert (f["high_watermark"], f["last_stable_offset"]) == (5, 5)
        assert [(a["producer_id"], a["first_offset"]) for a in f["aborted_transactions"]] == [(pid, 3)]
        assert _fetch(w, t, offset=3, isolation=0)["aborted_transactions"] in (None, [])
        # a commit after a completed abort: INVALID_TXN_STATE (transactions v0/v1)
        assert _end(w, txn, pid, epoch, True) == INVALID_TXN_STATE
        # a non-transactional batch under a transactional id, and a transactional batch without one
        assert _produce(w, txn, t, 0, batch([b"plain"]))["error_code"] == INVALID_TXN_STATE
        assert _produce(w, None, t, 0, _txn_batch([b"y"], pid, epoch, seq=3))["error_code"] == INVALID_TXN_STATE


def test_epochs_fencing_and_error_codes(wire_broker):
    t, txn = "t-" + uuid.uuid4().hex[:6], "tx-" + uuid.uuid4().hex[:6]
    with Wire(wire_broker.port) as w:
        assert w.create_topic(t)["error_code"] == 0
        assert _init(w, txn, timeout_ms=300001)["error_code"] == INVALID_TRANSACTION_TIMEOUT
        assert _init(w, "")["error_code"] == 42  # INVALID_REQUEST
        r = _init(w, txn)
        pid, e0 = r["producer_id"], r["producer_epoch"]
        assert _end(w, txn, pid, e0, True) == INVALID_TXN_STATE  # nothing to end in Empty
        assert _add(w, txn, pid + 1, e0, {t: [0]}) == {(t, 0): INVALID_PRODUCER_ID_MAPPING}
        assert _add(w, txn, pid, e0, {t: [0], "no-such-topic": [0]}) == {
            (t, 0): OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): UNKNOWN_TOPIC}
        assert _add(w, txn, pid, e0, {t: [0]}) == {(t, 0): NONE}
        assert _produce(w, txn, t, 0, _txn_batch([b"old"], pid, e0))["error_code"] == NONE
        # a second instance takes the id over: the open transaction is aborted first (CONCURRENT_TRANSACTIONS, retry)
        assert _init(w, txn)["error_code"] == CONCURRENT_TRANSACTIONS
        r2 = _init(w, txn)
        assert r2["error_code"] == NONE and r2["producer_id"] == pid and r2["producer_epoch"] == e0 + 2, r2
        # the old epoch is fenced everywhere: PRODUCER_FENCED from v2 (v4 for InitProducerId), 47 before
        assert _add(w, txn, pid, e0, {t: [0]}, version=2) == {(t, 0): PRODUCER_FENCED}
        assert _add(w, txn, pid, e0, {t: [0]}, version=1) == {(t, 0): INVALID_PRODUCER_EPOCH}
        assert _end(w, txn, pid, e0, True, version=3) == PRODUCER_FENCED
        assert _end(w, txn, pid, e0, True, version=1) == INVALID_PRODUCER_EPOCH
        assert _produce(w, txn, t, 0, _txn_batch([b"zombie"], pid, e0, seq=1))["error_code"] == INVALID_PRODUCER_EPOCH
        # KIP-360: re-initializing with the current (pid, epoch) bumps it; a stale pair is fenced
        r3 = _init(w, txn, pid=pid, epoch=r2["producer_epoch"])
        assert (r3["error_code"], r3["producer_epoch"]) == (NONE, e0 + 3)
        assert _init(w, txn, pid=pid, epoch=e0)["error_code"] == PRODUCER_FENCED
        assert _init(w, txn, pid=pid, epoch=e0, version=3)["error_code"] == INVALID_PRODUCER_EPOCH
        # the zombie's records were aborted with its transaction: read_committed shows none
        f = _fetch(w, t, offset=0)
        assert f["last_stable_offset"] == f["high_watermark"]
        assert [a["first_offset"] for a in f["aborted_transactions"]] == [0]
        # DescribeTransactions / ListTransactions
        d = w.call(65, 0, {"transactional_ids": [txn, "nope"]})["transaction_states"]
        assert (d[0]["error_code"], d[0]["transaction_state"], d[0]["producer_id"]) == (NONE, "Empty", pid)
        assert d[1]["error_code"] == TRANSACTIONAL_ID_NOT_FOUND
        lst = w.call(66, 1, {"state_filters": ["Empty", "Bogus"], "producer_id_filters": [], "duration_filter": -1})
        assert lst["unknown_state_filters"] == ["Bogus"]
        assert {(s["transactional_id"], s["transaction_state"]) for s in lst["transaction_states"]} >= {(txn, "Empty")}


def test_a_transaction_left_open_is_aborted_at_its_timeout(wire_broker, wait_for):
    t, txn = "t-" + uuid.uuid4().hex[:6], "tx-" + uuid.uuid4().hex[:6]
    with Wire(wire_broker.port) as w:
        assert w.create_topic(t)["error_code"] == 0
        r = _init(w, txn, timeout_ms=300)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add(w, txn, pid, epoch, {t: [0]}) == {(t, 0): NONE}
        assert _produce(w, txn, t, 0, _txn_batch([b"lost"], pid, epoch))["error_code"] == NONE
        assert _latest(w, t, 1) == 0
        wait_for(lambda: _latest(w, t, 1) == 2, timeout=30, what="the coordinator to abort the transaction")
        f = _fetch(w, t)
        assert [(a["producer_id"], a["first_offset"]) for a in f["aborted_transactions"]] == [(pid, 0)]
        # the producer was fenced by the abort (its epoch was bumped)
        assert _end(w, txn, pid, epoch, True) == PRODUCER_FENCED
        d = w.call(65, 0, {"transactional_ids": [txn]})["transaction_states"][0]
        assert (d["transaction_state"], d["producer_epoch"]) == ("CompleteAbort", epoch + 1)


def test_txn_offset_commit_is_pending_until_the_commit_and_require_stable_sees_it(wire_broker):
    t, txn, group = "t-" + uuid.uuid4().hex[:6], "tx-" + uuid.uuid4().hex[:6], "g-" + uuid.uuid4().hex[:6]
    with Wire(wire_broker.port) as w:
        assert w.create_topic(t)["error_code"] == 0
        r = _init(w, txn)
        pid, epoch = r["producer_id"], r["producer_epoch"]

        def commit_offsets(offset):
            return w.call(28, 3, {"transactional_id": txn, "group_id": group, "producer_id": pid,
                                  "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [{"name": t, "partitions": [
                                      {"partition_index": 0, "committed_offset": offset,
                                       "committed_leader_epoch": -1, "committed_metadata": "m"}]}]})

        def fetch_offset(require_stable, version=7):
            body = {"group_id": group, "topics": [{"name": t, "partition_indexes": [0]}]}
            if version >= 7:
                body["require_stable"] = require_stable
            p = w.call(9, version, body)["topics"][0]["partitions"][0]
            return p["error_code"], p["committed_offset"]

        # TxnOffsetCommit before AddOffsetsToTxn: refused
        assert commit_offsets(5)["topics"][0]["partitions"][0]["error_code"] == INVALID_TXN_STATE
        assert w.call(25, 3, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                              "group_id": group})["error_code"] == NONE
        assert commit_offsets(5)["topics"][0]["partitions"][0]["error_code"] == NONE
        assert fetch_offset(True) == (UNSTABLE_OFFSET_COMMIT, -1)
        assert fetch_offset(False) == (NONE, -1)
        assert fetch_offset(False, version=3) == (NONE, -1)
        assert _end(w, txn, pid, epoch, True) == NONE
        assert fetch_offset(True) == (NONE, 5)
        # an aborted offset commit never takes effect
        assert w.call(25, 3, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                              "group_id": group})["error_code"] == NONE
        assert commit_offsets(9)["topics"][0]["partitions"][0]["error_code"] == NONE
        assert _end(w, txn, pid, epoch, False) == NONE
        assert fetch_offset(True) == (NONE, 5)
    # and after a restart (the offsets are replayed from __consumer_offsets, markers included)
    wire_broker.stop()
    wire_broker.start()
    with Wire(wire_broker.port) as w:
        p = w.call(9, 7, {"group_id": group, "topics": [{"name": t, "partition_indexes": [0]}],
                          "require_stable": True})["topics"][0]["partitions"][0]
        assert (p["error_code"], p["committed_offset"]) == (NONE, 5)


def test_confluent_kafka_transactions_with_read_committed_consumers(wire_broker):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    bs = f"127.0.0.1:{wire_broker.port}"
    t, txn = "t-" + uuid.uuid4().hex[:6], "tx-" + uuid.uuid4().hex[:6]
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(t, 2, 1)])[t].result(10)
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": txn, "log_level": 0})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(6):
        p.produce(t, b"c%d" % i, partition=i % 2)
    p.commit_transaction(10)
    p.begin_transaction()
    for i in range(4):
        p.produce(t, b"a%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(10)
    group = "cg-" + txn
    gc = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                      "log_level": 0})
    p.begin_transaction()
    p.produce(t, b"last", partition=0)
    p.send_offsets_to_transaction([ck.TopicPartition(t, 0, 4)], gc.consumer_group_metadata(), 10)
    p.commit_transaction(10)
    assert [tp.offset for tp in gc.committed([ck.TopicPartition(t, 0)], 10)] == [4]
    gc.close()

    def read(isolation):
        c = ck.Consumer({"bootstrap.servers": bs, "group.id": "r-" + uuid.uuid4().hex[:6],
                         "isolation.level": isolation, "enable.partition.eof": True, "log_level": 0})
        c.assign([ck.TopicPartition(t, 0, 0), ck.TopicPartition(t, 1, 0)])
        got, eof = [], set()
        for _ in range(200):
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                if len(eof) == 2:
                    break
                continue
            got.append(m.value())
        ends = [c.get_watermark_offsets(ck.TopicPartition(t, i), cached=False) for i in (0, 1)]
        c.close()
        return sorted(got), ends

    committed, ends = read("read_committed")
    assert committed == sorted([b"c%d" % i for i in range(6)] + [b"last"]), committed
    uncommitted, _ = read("read_uncommitted")
    assert uncommitted == sorted(committed + [b"a%d" % i for i in range(4)])
    # 3 + 2 + 1 records on partition 0 and three markers; 3 + 2 and two markers on partition 1
    assert ends == [(0, 9), (0, 7)], ends

    # fencing: a second producer with the same id; the first one's commit is refused for good
    p.begin_transaction()
    p.produce(t, b"zombie", partition=1)
    p.flush(10)
    p2 = ck.Producer({"bootstrap.servers": bs, "transactional.id": txn, "log_level": 0})
    p2.init_transactions(30)
    with pytest.raises(ck.KafkaException) as e:
        p.commit_transaction(10)
    assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort(), e.value
    p2.begin_transaction()
    p2.produce(t, b"p2", partition=1)
    p2.commit_transaction(10)
    committed, _ = read("read_committed")
    assert b"zombie" not in committed and b"p2" in committed


def test_describe_producers_and_write_txn_markers_end_a_hanging_transaction(wire_broker):
    """What `kafka-transactions describe-producers` and `abort` send (the full tool against Apache Kafka is in
    tests/compat/test_kafka_transactions_tool.py, under -m slow): DescribeProducers shows the open transaction's start
    offset and epoch, WriteTxnMarkers with that epoch ends it (a fenced epoch is refused), the LSO reaches the high
    watermark and the coordinator epoch of the producer's last marker is reported."""
    t, txn = "t-" + uuid.uuid4().hex[:6], "tx-" + uuid.uuid4().hex[:6]
    with Wire(wire_broker.port) as w:
        assert w.create_topic(t)["error_code"] == 0
        assert _produce(w, None, t, 0, batch([b"plain"]))["error_code"] == NONE
        r = _init(w, txn)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add(w, txn, pid, epoch, {t: [0]}) == {(t, 0): NONE}
        assert _produce(w, txn, t, 0, _txn_batch([b"h0", b"h1"], pid, epoch))["base_offset"] == 1

        def producers():
            r = w.call(61, 0, {"topics": [{"name": t, "partition_indexes": [0]}]})
            p = r["topics"][0]["partitions"][0]
            assert p["error_code"] == NONE, p
            return {a["producer_id"]: (a["producer_epoch"], a["coordinator_epoch"], a["current_txn_start_offset"])
                    for a in p["active_producers"]}
        assert producers()[pid] == (epoch, -1, 1)

        def markers(e):
            r = w.call(27, 1, {"markers": [{"producer_id": pid, "producer_epoch": e, "transaction_result": False,
                                            "topics": [{"name": t, "partition_indexes": [0]}],
                                            "coordinator_epoch": 0}]})
            return r["markers"][0]["topics"][0]["partitions"][0]["error_code"]
        assert _latest(w, t, 1) == 1
        assert markers(epoch) == NONE
        assert _latest(w, t, 1) == _latest(w, t, 0) == 4
        assert producers()[pid] == (epoch, 0, -1)
        assert markers(epoch - 1) == INVALID_PRODUCER_EPOCH
        f = _fetch(w, t, offset=1)
        assert [(a["producer_id"], a["first_offset"]) for a in f["aborted_transactions"]] == [(pid, 1)]
