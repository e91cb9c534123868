"""KafkaConsumer on real files: kafka-python's names and shapes, positions, resets, commits, blocking poll woken by
appends from this process and from another one."""

import json
import subprocess
import sys
import threading
import time

import pytest
from kafka.consumer.fetcher import ConsumerRecord as KafkaConsumerRecord

import kafkalog
from kafkalog import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafkalog.errors import (
    IllegalStateError,
    InvalidConfigError,
    NoOffsetForPartitionError,
    UnknownTopicOrPartitionError,
)

T0 = 1_700_000_000_000
TP0 = TopicPartition("t", 0)


@pytest.fixture
def store(data_dir):
    s = kafkalog.LogStore(data_dir, maintenance=False)
    yield s
    s.close()


def fill(store, n, partitions=1, topic="t", ts0=T0):
    if topic not in store.topics():
        store.create_topic(topic, partitions)
    for p in range(partitions):
        store.log(topic, p).append_batch([b"%s-%d-%d" % (topic.encode(), p, i) for i in range(n)],
                                         keys=[b"k%d" % i for i in range(n)],
                                         timestamps=[ts0 + i * 1000 for i in range(n)],
                                         headers=[[("h", b"%d" % i)] for i in range(n)])


def drain(consumer, want, timeout_s=10.0):
    got = []
    end = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < end:
        for recs in consumer.poll(timeout_ms=100).values():
            got.extend(recs)
    return got


def test_record_shape_matches_kafka_python(store):
    fill(store, 3)
    c = KafkaConsumer("t", store=store, auto_offset_reset="earliest")
    recs = c.poll(timeout_ms=1000)[TP0]
    assert KafkaConsumerRecord._fields == kafkalog.ConsumerRecord._fields
    r = recs[1]
    assert (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type) == ("t", 0, 1, T0 + 1000, 0)
    assert (r.key, r.value, r.headers) == (b"k1", b"t-0-1", [("h", b"1")])
    assert (r.serialized_key_size, r.serialized_value_size, r.serialized_header_size) == (2, 5, 2)
    c.close()


def test_poll_respects_max_records_and_positions(store):
    fill(store, 50, partitions=2)
    c = KafkaConsumer("t", store=store, auto_offset_reset="earliest", max_poll_records=7)
    seen = {0: [], 1: []}
    for _ in range(40):
        batch = c.poll(timeout_ms=100)
        assert sum(len(v) for v in batch.values()) <= 7
        for tp, recs in batch.items():
            seen[tp.partition].extend(r.offset for r in recs)
        if all(len(v) == 50 for v in seen.values()):
            break
    assert seen == {0: list(range(50)), 1: list(range(50))}
    assert c.position(TP0) == 50
    assert c.poll(timeout_ms=0, max_records=3) == {}
    c.close()


def test_auto_offset_reset_latest_earliest_none(store):
    fill(store, 10)
    latest = KafkaConsumer("t", store=store)  # kafka-python's default: latest
    assert latest.position(TP0) == 10
    assert latest.poll(timeout_ms=50) == {}
    earliest = KafkaConsumer("t", store=store, auto_offset_reset="earliest")
    assert earliest.position(TP0) == 0
    none = KafkaConsumer("t", store=store, auto_offset_reset="none")
    with pytest.raises(NoOffsetForPartitionError, match="t-0|TopicPartition"):
        none.position(TP0)
    for c in (latest, earliest, none):
        c.close()


def test_seek_and_offsets_for_times(store):
    fill(store, 20)
    c = KafkaConsumer(store=store)
    c.assign([TP0])
    found = c.offsets_for_times({TP0: T0 + 5500})
    assert found[TP0].offset == 6 and found[TP0].timestamp == T0 + 6000
    assert c.offsets_for_times({TP0: T0 + 10**9}) == {TP0: None}
    c.seek(TP0, found[TP0].offset)
    assert [r.offset for r in c.poll(timeout_ms=100)[TP0]] == list(range(6, 20))
    c.seek_to_beginning()
    assert c.position(TP0) == 0
    c.seek_to_end(TP0)
    assert c.position(TP0) == 20
    assert c.beginning_offsets([TP0]) == {TP0: 0} and c.end_offsets([TP0]) == {TP0: 20}
    with pytest.raises(ValueError):
        c.offsets_for_times({TP0: -5})
    with pytest.raises(IllegalStateError):
        c.seek(TopicPartition("t", 3), 0)
    c.close()


def test_delete_before_moves_position_per_auto_offset_reset(store):
    fill(store, 30)
    c = KafkaConsumer(store=store, auto_offset_reset="earliest")
    c.assign([TP0])
    c.seek(TP0, 5)
    store.log("t", 0).delete_records_before(20)
    assert [r.offset for r in c.poll(timeout_ms=100)[TP0]] == list(range(20, 30))
    latest = KafkaConsumer(store=store, auto_offset_reset="latest")
    latest.assign([TP0])
    latest.seek(TP0, 3)
    assert latest.poll(timeout_ms=50) == {}
    assert latest.position(TP0) == 30
    c.close()
    latest.close()


def test_pause_resume(store):
    fill(store, 5, partitions=2)
    c = KafkaConsumer("t", store=store, auto_offset_reset="earliest")
    c.pause(TP0)
    assert c.paused() == {TP0}
    got = drain(c, 5, timeout_s=1)
    assert {r.partition for r in got} == {1}
    c.resume(TP0)
    assert {r.partition for r in drain(c, 5)} == {0}
    c.close()


def test_commit_committed_and_resume_from_commit(store):
    fill(store, 10)
    c = KafkaConsumer("t", store=store, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    assert len(drain(c, 10)) == 10
    assert c.committed(TP0) is None
    c.commit({TP0: OffsetAndMetadata(4, "m", None)})
    assert c.committed(TP0) == 4
    assert c.committed(TP0, metadata=True).metadata == "m"
    c.close()
    c2 = KafkaConsumer("t", store=store, group_id="g", auto_offset_reset="earliest")
    assert [r.offset for r in drain(c2, 6)] == list(range(4, 10))
    c2.close()  # auto commit on close
    assert store.offsets.committed("g", TP0).offset == 10


def test_commit_async_calls_back(store):
    fill(store, 3)
    c = KafkaConsumer("t", store=store, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    drain(c, 3)
    calls = []
    fut = c.commit_async(callback=lambda offsets, err: calls.append((offsets, err)))
    assert fut.result() is None
    assert calls and calls[0][1] is None and calls[0][0][TP0].offset == 3
    c.close(autocommit=False)


def test_deserializers_and_iteration(store):
    store.create_topic("j", 1)
    store.log("j", 0).append_batch([json.dumps({"i": i}).encode() for i in range(4)], keys=[b"a"] * 4)
    c = KafkaConsumer("j", store=store, auto_offset_reset="earliest", consumer_timeout_ms=300,
                      value_deserializer=lambda v: json.loads(v), key_deserializer=bytes.decode)
    got = list(c)
    assert [r.value for r in got] == [{"i": i} for i in range(4)] and got[0].key == "a"
    c.close()


def test_config_and_state_errors(store, data_dir):
    fill(store, 1)
    with pytest.raises(InvalidConfigError, match="nonsense"):
        KafkaConsumer("t", store=store, nonsense=1)
    with pytest.raises(InvalidConfigError, match="auto_offset_reset"):
        KafkaConsumer("t", store=store, auto_offset_reset="middle")
    with pytest.raises(InvalidConfigError, match="store"):
        KafkaConsumer("t")
    c = KafkaConsumer("t", store=store, bootstrap_servers="ignored:9092")  # network settings are accepted
    with pytest.raises(IllegalStateError, match="assign"):
        c.assign([TP0])
    with pytest.raises(IllegalStateError, match="group_id"):
        c.commit()
    c.close()
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll()
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        KafkaConsumer(store=store).assign([TopicPartition("nope", 0)])


def test_poll_woken_by_append_in_this_process(store):
    store.create_topic("t", 1)
    c = KafkaConsumer("t", store=store)
    assert c.position(TP0) == 0
    log = store.log("t", 0)
    threading.Timer(0.2, lambda: log.append(b"late")).start()
    t0 = time.monotonic()
    got = c.poll(timeout_ms=20_000)
    waited = time.monotonic() - t0
    assert [r.value for r in got[TP0]] == [b"late"]
    assert waited < 15  # woken by the append, not by the timeout
    c.close()


_APPENDER = r"""
import sys, time, kafkalog
with kafkalog.LogStore(sys.argv[1], maintenance=False) as s:
    time.sleep(0.3)
    s.log("t", 0).append_batch([b"from-child"])
"""


def test_poll_woken_by_append_in_another_process(store, data_dir, child_env, tmp_path):
    store.create_topic("t", 1)
    c = KafkaConsumer("t", store=data_dir)  # its own read-only view of the directory
    assert c.position(TP0) == 0
    script = tmp_path / "appender.py"
    script.write_text(_APPENDER)
    p = subprocess.Popen([sys.executable, str(script), str(data_dir)], env=child_env)
    try:
        got = c.poll(timeout_ms=30_000)
    finally:
        p.wait(timeout=60)
    assert p.returncode == 0
    assert [r.value for r in got[TP0]] == [b"from-child"]
    c.close()


def test_producer_to_consumer_roundtrip_keys_follow_partitioner(store):
    store.create_topic("t", 4)
    prod = KafkaProducer(store, linger_ms=5)
    sent = {}
    for i in range(200):
        md = prod.send("t", key=b"key-%d" % (i % 17), value=b"%d" % i).get(timeout=10)
        sent.setdefault(md.partition, []).append((md.offset, b"%d" % i))
    prod.close()
    c = KafkaConsumer("t", store=store, auto_offset_reset="earliest")
    got = {}
    for r in drain(c, 200):
        got.setdefault(r.partition, []).append((r.offset, r.value))
    assert got == sent
    c.close()


def test_records_without_headers_share_a_read_only_empty_list(store):
    store.create_topic("h", 1)
    store.log("h", 0).append_batch([b"a", b"b"], headers=[[], [("x", b"1")]])
    c = KafkaConsumer("h", store=store, auto_offset_reset="earliest")
    a, b = c.poll(timeout_ms=1000)[TopicPartition("h", 0)]
    assert a.headers == [] and isinstance(a.headers, list) and a.serialized_header_size == -1
    with pytest.raises(TypeError, match="read-only"):
        a.headers.append(("y", b"2"))
    assert list(a.headers) == []
    b.headers.append(("y", b"2"))  # a record's own headers list stays an ordinary list
    assert b.headers == [("x", b"1"), ("y", b"2")] and b.serialized_header_size == 2
    c.close()


def test_a_consumer_moves_past_transaction_markers_of_a_kafka_log(tmp_path):
    """A Kafka log dir (read-only) holds transaction markers: polls return the records around them and the
    position moves past a trailing marker instead of reading it again forever."""
    import struct

    from kafkalog import LogStore
    from kafkalog._engine import batch as R
    with LogStore(tmp_path, exclusive=True) as store:
        store.create_topic("tx", 1)
        store.log("tx", 0).append_records(R.build_batch([b"a", b"b"]))
    key, value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3)  # COMMIT marker
    raw = bytearray(R.build_batch([value], keys=[key], base_offset=2, producer_id=5, producer_epoch=0,
                                  is_transactional=True))
    struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] | 0x20)  # the control bit
    struct.pack_into(">I", raw, 17, R.crc32c(bytes(raw[21:])))
    (segment,) = (tmp_path / "tx-0").glob("*.log")
    c = KafkaConsumer(store=str(tmp_path), auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition("tx", 0)])
        got = []
        for recs in c.poll(timeout_ms=50).values():
            got += [(r.offset, r.value) for r in recs]
        assert got == [(0, b"a"), (1, b"b")] and c.position(TopicPartition("tx", 0)) == 2
        with open(segment, "r+b") as f:  # the marker arrives after the records were read, alone in its poll
            f.seek(0, 2)
            f.write(raw)
        # and is counted in the partition's change counter, as every kafkalog writer counts its appends (views of
        # other processes take the files in when it moves; a log dir is read from Kafka stopped or hot-copied)
        from kafkalog._engine.segment import CHANGE_COUNTER_FILE, ChangeCounter
        ChangeCounter(str(segment.parent / CHANGE_COUNTER_FILE), True).bump()
        for _ in range(5):
            for recs in c.poll(timeout_ms=50).values():
                got += [(r.offset, r.value) for r in recs]
        assert got == [(0, b"a"), (1, b"b")]
        assert c.position(TopicPartition("tx", 0)) == 3
    finally:
        c.close()


def test_records_an_app_keeps_never_change_while_it_polls_on(store):
    """Polls refill records the app dropped (a RecordPool per partition); the ones it keeps, whole lists or single
    records, stay as they were returned. Also: a poll that uses up its chunk goes on into the next one."""
    store.create_topic("t", 1)
    for b in range(0, 400, 20):  # batches of 20 records, about 600 bytes: a 700-byte chunk holds one
        store.log("t", 0).append_batch([b"t-0-%d" % o for o in range(b, b + 20)],
                                       keys=[b"k%d" % o for o in range(b, b + 20)],
                                       timestamps=[T0 + o * 1000 for o in range(b, b + 20)],
                                       headers=[[("h", b"%d" % o)] for o in range(b, b + 20)])
    c = KafkaConsumer(store=store, auto_offset_reset="earliest", max_poll_records=30, max_partition_fetch_bytes=700)
    c.assign([TP0])
    kept, got = [], 0
    for i in range(40):
        recs = c.poll(timeout_ms=1000).get(TP0, [])
        if not recs:
            break
        assert len(recs) == min(30, 400 - got)  # a chunk holds 20: a poll drains one into the next
        if i % 3 == 0:
            kept.append((recs, list(range(got, got + len(recs)))))
        elif i % 3 == 1:
            kept.append(([recs[-1]], [got + len(recs) - 1]))
        got += len(recs)
    assert got == 400
    for recs, offsets in kept:
        assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in recs] == [
            (o, b"k%d" % o, b"t-0-%d" % o, [("h", b"%d" % o)], T0 + o * 1000) for o in offsets]
    c.close()
