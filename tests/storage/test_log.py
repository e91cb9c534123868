"""Log and LogStore behaviour, ported from Kafka's LogSegmentTest, LogLoaderTest, UnifiedLogTest, LocalLogTest and
DeleteRecordsRequestTest (reference/kafka-storage.md section 10), run on real files."""

import errno
import logging
import os
import threading
import time

import numpy as np
import pytest

import kafkalog
from kafkalog._engine.batch import build_batch, iter_batches
from kafkalog.errors import (
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalog.storage import failpoints

T0 = 1_700_000_000_000


def ot(found):
    return None if found is None else (found.offset, found.timestamp)


def values(n, start=0):
    return [b"value-%d" % i for i in range(start, start + n)]


def fresh(open_store, config=None, topic="t", partitions=1, topic_config=None, **kw):
    store = open_store(config, **kw)
    store.create_topic(topic, partitions, topic_config)
    return store, store.log(topic, 0)


# ---------------------------------------------------------------------------------------------------- basics

def test_append_read_roundtrip_and_offsets(open_store):
    store, log = fresh(open_store)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.append(b"a", key=b"k", timestamp=T0, headers=[("h", b"v")]) == 0
    assert log.append_batch(values(5), timestamps=[T0 + i for i in range(5)]) == 1
    assert log.log_end_offset == log.high_watermark == 6
    recs = list(log.records())
    assert [r.offset for r in recs] == list(range(6))
    assert (recs[0].key, recs[0].value, recs[0].headers, recs[0].timestamp) == (b"k", b"a", [("h", b"v")], T0)
    assert [r.value for r in recs[1:]] == values(5)
    assert all(r.timestamp_type == 0 for r in recs)


@pytest.mark.parametrize("exclusive", [True, False])
def test_an_append_larger_than_a_segment_is_refused_without_using_offsets(open_store, exclusive):
    """RecordBatchTooLargeError before any offset is claimed: the next append takes the next offset (no gap)."""
    store, log = fresh(open_store, exclusive=exclusive, topic_config={"segment.bytes": 2048})
    log.append(b"a")
    with pytest.raises(RecordBatchTooLargeError):
        log.append_batch([os.urandom(1000) for _ in range(3)])
    with pytest.raises(RecordBatchTooLargeError):
        log.append_records(build_batch([os.urandom(1000) for _ in range(3)]))
    assert log.append_batch([b"b"]) == 1
    assert [r.offset for r in log.records()] == [0, 1]


def test_records_range_is_half_open_and_mid_batch(open_store):
    store, log = fresh(open_store)
    log.append_batch(values(10), timestamps=[T0] * 10)
    assert [r.offset for r in log.records(3, 7)] == [3, 4, 5, 6]
    assert list(log.records(10)) == []


def test_read_returns_whole_batches_zero_copy_and_at_least_one(open_store):
    store, log = fresh(open_store)
    for i in range(5):
        log.append_batch(values(100, i * 100), timestamps=[T0] * 100)
    view = log.read(150, max_bytes=1)  # KIP-74: one whole batch even above max_bytes
    assert isinstance(view, memoryview) and view.readonly
    batches = list(iter_batches(view))
    assert len(batches) == 1 and batches[0].base_offset == 100 and batches[0].last_offset == 199
    big = log.read(0, max_bytes=10**9)
    assert sum(b.record_count for b in iter_batches(big)) == 500
    assert len(log.read(500)) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(501)


def test_fetch_answers_offsets_and_batches_in_one_look(open_store):
    store, log = fresh(open_store)
    for i in range(3):
        log.append_batch(values(10, i * 10), timestamps=[T0] * 10)
    lso, hwm, view = log.fetch(15, max_bytes=1)
    assert (lso, hwm) == (0, 30)
    assert [b.base_offset for b in iter_batches(view)] == [10]  # the batch holding 15, whole
    assert log.fetch(30, 1 << 20) == (0, 30, None)  # at the high watermark: nothing to read
    assert log.fetch(5, 0)[2] is None  # no budget left
    log.delete_records_before(12)
    assert log.fetch(12, 1 << 20)[0] == 12 and log.last_known_log_start_offset == 12
    for bad in (11, 31):
        with pytest.raises(OffsetOutOfRangeError):
            log.fetch(bad, 1 << 20)


def test_read_view_survives_segment_deletion(open_store):
    store, log = fresh(open_store, topic_config={"segment.bytes": 2000, "file.delete.delay.ms": 0})
    for i in range(20):
        log.append_batch(values(10, i * 10), timestamps=[T0] * 10)
    view = log.read(0)
    expected = bytes(view)
    log.delete_records_before(150)
    assert bytes(view) == expected  # the mapping lives as long as the view


def test_reopen_clean_keeps_everything(open_store, data_dir):
    store, log = fresh(open_store, topic_config={"segment.bytes": 5000})
    for i in range(30):
        log.append_batch(values(10, i * 10), timestamps=[T0 + i * 10 + j for j in range(10)])
    store.close()
    store = open_store()
    log = store.log("t", 0)
    assert log.log_end_offset == 300
    assert [r.value for r in log.records()] == values(300)
    assert log.offset_for_time(T0 + 155).offset == 155


# ---------------------------------------------------------------------------------------------------- timestamps

def test_offset_for_time_kafka_cases(open_store):
    """LogSegmentTest.testFindOffsetByTimestamp: records 40..49 with ts = offset*10, sparse index."""
    store = open_store()
    store.create_topic("t", 1, {"index.interval.bytes": 150})
    log = store.log("t", 0)
    log.append_batch(values(40), timestamps=[i * 10 for i in range(40)])
    for i in range(40, 50):
        log.append_batch([b"msg%d" % i], timestamps=[i * 10])
    assert ot(log.offset_for_time(420)) == (42, 420)
    assert log.offset_for_time(421).offset == 43
    assert log.offset_for_time(430).offset == 43
    assert log.offset_for_time(431).offset == 44
    assert log.offset_for_time(491) is None
    assert log.offset_for_time(401).offset == 41
    assert log.offset_for_time(399).offset == 40
    found = log.offset_for_time(401)
    assert (found.offset, found.timestamp) == (41, 410)


def test_offset_for_time_special_targets(open_store):
    store, log = fresh(open_store)
    assert log.offset_for_time(-3) is None  # empty log
    log.append_batch(values(7), timestamps=[0, 1, 2, 3, 4, 6, 5])
    assert ot(log.offset_for_time(-3)) == (5, 6)  # KAFKA-16310: the exact record, not the batch's last offset
    assert ot(log.offset_for_time(-1)) == (7, -1)
    assert ot(log.offset_for_time(-2)) == (0, -1)
    log.delete_records_before(3)
    assert ot(log.offset_for_time(-2)) == (3, -1)
    assert log.offset_for_time(0).offset == 3  # never below the log start offset


def test_max_timestamp_first_of_equal(open_store):
    store, log = fresh(open_store)
    log.append_batch(values(3), timestamps=[T0, T0 + 1, T0])
    assert ot(log.offset_for_time(-3)) == (1, T0 + 1)


def test_offset_for_time_unordered_create_time_follows_offset_order(open_store):
    store, log = fresh(open_store)
    log.append_batch(values(4), timestamps=[T0 + 50, T0 + 10, T0 + 60, T0 + 20])
    # first record in offset order with ts >= target, not the minimal-ts one
    assert log.offset_for_time(T0 + 15).offset == 0
    assert log.offset_for_time(T0 + 55).offset == 2


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_offset_for_time_inside_compressed_batches(open_store, codec):
    store, log = fresh(open_store)
    for i in range(10):
        log.append_batch(values(100, i * 100), timestamps=[T0 + (i * 100 + j) * 2 for j in range(100)],
                         compression=codec)
    assert log.offset_for_time(T0 + 2 * 537).offset == 537
    assert log.offset_for_time(T0 + 2 * 537 - 1).offset == 537
    assert log.offset_for_time(T0 + 2 * 999 + 1) is None
    assert [r.offset for r in log.records(530, 540)] == list(range(530, 540))


def _now_ms():
    return time.time_ns() // 1_000_000  # the log's clock, floored the same way (a float product can round up)


def test_log_append_time_overrides_and_is_searchable(open_store):
    """LogAppendTime is the time a batch is written to the log, as Kafka's broker stamps at append to the log:
    append_batch() is written at once, an exclusive store's append() when its staged batch is (here by flush())."""
    store, log = fresh(open_store, topic_config={"message.timestamp.type": "LogAppendTime"})
    before = _now_ms()
    log.append_batch(values(3), timestamps=[1, 2, 3])
    log.append(b"x", timestamp=5)  # staged: not in the log yet
    staged = _now_ms()
    log.flush()  # writes the staged batch
    after = _now_ms()
    recs = list(log.records())
    assert [(r.offset, r.timestamp_type) for r in recs] == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert all(before <= r.timestamp <= staged for r in recs[:3]), (before, staged, recs)
    assert staged <= recs[3].timestamp <= after, (staged, after, recs[3])
    assert log.offset_for_time(before).offset == 0
    assert ot(log.offset_for_time(recs[3].timestamp)) == next((r.offset, r.timestamp) for r in recs
                                                              if r.timestamp >= recs[3].timestamp)
    assert log.offset_for_time(after + 1) is None


@pytest.mark.parametrize("exclusive", [True, False])
def test_log_append_time_rolls_by_its_stamp(open_store, exclusive):
    """segment.ms counts in the time the log stamped, staged appends included: records a producer dated ten hours
    ahead do not roll a segment per written batch."""
    store, log = fresh(open_store, topic_config={"message.timestamp.type": "LogAppendTime", "segment.ms": 3_600_000},
                       exclusive=exclusive)
    ahead = _now_ms() + 10 * 3_600_000
    for _ in range(3):
        log.append(b"x", timestamp=ahead)
        log.flush()
    log.append_batch([b"y"], timestamps=[ahead])
    assert len(log.segments()) == 1
    assert all(r.timestamp < ahead for r in log.records())


def test_timestamp_bounds(open_store):
    store, log = fresh(open_store, topic_config={"message.timestamp.before.max.ms": 60000})
    now = int(time.time() * 1000)
    with pytest.raises(InvalidTimestampError) as e:
        log.append(b"x", timestamp=now - 3_600_000)
    assert e.value.code == 32
    with pytest.raises(InvalidTimestampError):
        log.append_batch([b"x"], timestamps=[now + 2 * 3_600_000])  # after.max.ms default 1 h (Kafka 4.0)
    assert log.log_end_offset == 0
    log.append(b"ok", timestamp=now)
    assert log.log_end_offset == 1
    # a raw batch whose first and largest timestamps are in bounds but a middle record is too old
    raw = build_batch([b"a", b"b", b"c"], timestamps=[now, now - 3_600_000, now])
    with pytest.raises(InvalidTimestampError):
        log.append_records(raw)
    with pytest.raises(InvalidTimestampError):  # the producer's trusted path takes the checking one on such topics
        log.append_built(bytearray(raw), 3, now)
    assert log.log_end_offset == 1


def test_append_built_stamps_in_place(open_store):
    store, log = fresh(open_store)
    log.append(b"first", timestamp=T0)
    buf = bytearray(build_batch([b"a", b"b"], timestamps=[T0, T0 + 5]))
    assert log.append_built(buf, 2, T0 + 5) == 1
    assert next(iter_batches(buf)).base_offset == 1  # stamped in the caller's buffer, no copy
    assert [(r.offset, r.value) for r in log.records()] == [(0, b"first"), (1, b"a"), (2, b"b")]
    assert log.offset_for_time(T0 + 3).offset == 2


# ---------------------------------------------------------------------------------------------------- size limits

def test_max_message_bytes(open_store):
    store, log = fresh(open_store, topic_config={"max.message.bytes": 1000})
    with pytest.raises(RecordTooLargeError) as e:
        log.append_batch([b"x" * 2000])
    assert e.value.code == 10
    with pytest.raises(RecordTooLargeError):
        log.append(b"x" * 2000)
    log.append_batch([b"x" * 100])
    assert log.log_end_offset == 1


# ---------------------------------------------------------------------------------------------------- append_records

def test_append_records_rewrites_base_offset_only(open_store):
    store, log = fresh(open_store)
    log.append_batch(values(3))
    raw = build_batch([b"a", b"b"], timestamps=[T0, T0 + 1], compression=3) + \
        build_batch([b"c"], timestamps=[T0 + 2], compression=4)
    first, last = log.append_records(raw)
    assert (first, last) == (3, 5)
    stored = bytes(log.read(3, 10**6))
    assert len(stored) == len(raw)
    a, b = list(iter_batches(stored))
    assert (a.base_offset, b.base_offset) == (3, 5)
    # every byte but the 8-byte base offsets is what the producer sent: no recompression
    assert stored[8:a.size_in_bytes] == raw[8:a.size_in_bytes]
    assert stored[a.size_in_bytes + 8:] == raw[a.size_in_bytes + 8:]
    assert a.is_valid() and b.is_valid()
    assert [r.value for r in log.records(3)] == [b"a", b"b", b"c"]


def test_append_records_rejects_whole_request_on_bad_batch(open_store):
    store, log = fresh(open_store)
    good = build_batch([b"a"], timestamps=[T0])
    bad = bytearray(build_batch([b"b"], timestamps=[T0]))
    bad[-1] ^= 0xFF  # CRC mismatch
    with pytest.raises(Exception) as e:
        log.append_records(good + bytes(bad))
    assert e.value.code in (2, 87)
    with pytest.raises(InvalidRecordError):
        log.append_records(good + b"\x00" * 5)
    assert log.log_end_offset == 0  # nothing appended, nothing lost


def test_append_records_topic_codec_recompresses(open_store):
    store, log = fresh(open_store, topic_config={"compression.type": "zstd"})
    log.append_records(build_batch([b"a", b"b"], timestamps=[T0, T0], compression=3))
    (batch,) = list(iter_batches(log.read(0)))
    assert batch.compression == 4
    assert [r.value for r in log.records()] == [b"a", b"b"]


# ---------------------------------------------------------------------------------------------------- roll

def test_size_based_roll_and_index_entries(open_store):
    store, log = fresh(open_store, topic_config={"segment.bytes": 4096, "index.interval.bytes": 500})
    for i in range(100):
        log.append_batch(values(5, i * 5), timestamps=[T0 + i] * 5)
    segs = log.segments()
    assert len(segs) >= 4
    for s in segs[:-1]:
        assert s.size <= 4096
        # sealed segments: indexes trimmed to their entries
        assert os.path.getsize(s.dir / ("%020d.index" % s.base_offset)) == s.offset_index.entries * 8
    assert [r.offset for r in log.records()] == list(range(500))


def test_time_based_roll_uses_record_time(open_store):
    store, log = fresh(open_store, topic_config={"segment.ms": 1000})
    log.append_batch([b"a"], timestamps=[T0])
    log.append_batch([b"b"], timestamps=[T0 + 1000])  # not more than segment.ms: same segment
    assert len(log.segments()) == 1
    log.append_batch([b"c"], timestamps=[T0 + 1001])
    assert len(log.segments()) == 2
    assert log.segments()[1].base_offset == 2


def test_roll_with_jitter_bounds(open_store):
    store, log = fresh(open_store, topic_config={"segment.ms": 1000, "segment.jitter.ms": 500})
    log.append_batch([b"a"], timestamps=[T0])
    log.append_batch([b"b"], timestamps=[T0 + 500])  # jitter <= 500: never rolls at segment.ms - maxJitter
    assert len(log.segments()) == 1
    log.append_batch([b"c"], timestamps=[T0 + 1001])  # always rolls past segment.ms
    assert len(log.segments()) == 2


def test_index_full_rolls(open_store):
    store, log = fresh(open_store, topic_config={"segment.index.bytes": 8 * 3, "index.interval.bytes": 1})
    for i in range(20):
        log.append_batch([b"x%d" % i], timestamps=[T0 + i])
    assert len(log.segments()) > 3
    assert [r.offset for r in log.records()] == list(range(20))


# ---------------------------------------------------------------------------------------------------- delete-before

def test_delete_records_kafka_cases(open_store):
    """UnifiedLogTest: 15 records in 3 segments; LSO 1 -> 3 segs; 6 -> 2; 15 -> 1."""
    store, log = fresh(open_store, topic_config={"file.delete.delay.ms": 0})
    for i in range(15):
        if i and i % 5 == 0:
            log.roll()
        log.append_batch([b"r%d" % i], timestamps=[T0 + i])
    assert len(log.segments()) == 3
    assert log.delete_records_before(1) == 1
    assert len(log.segments()) == 3
    assert log.delete_records_before(6) == 6
    assert len(log.segments()) == 2
    assert log.delete_records_before(15) == 15
    assert len(log.segments()) == 1
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.delete_records_before(16)
    assert e.value.code == 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(14)
    assert len(log.read(15)) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(16)
    assert log.delete_records_before(3) == 15  # never decreases


def test_delete_records_mid_batch_never_returns_below(open_store):
    store, log = fresh(open_store)
    log.append_batch(values(10), timestamps=[T0 + i for i in range(10)])
    assert log.delete_records_before(4) == 4
    assert [r.offset for r in log.records()] == list(range(4, 10))
    assert log.read_columns()["offset"].tolist() == list(range(4, 10))
    with pytest.raises(OffsetOutOfRangeError):
        list(log.records(3))
    assert log.offset_for_time(T0).offset == 4


def test_delete_records_minus_one_is_high_watermark_and_checkpointed(open_store, data_dir):
    store, log = fresh(open_store)
    log.append_batch(values(10))
    assert log.delete_records_before(-1) == 10
    # fsynced before returning: the checkpoint file already names it, in Kafka's format
    text = (data_dir / "log-start-offset-checkpoint").read_text().split("\n")
    assert text[0] == "0" and text[1] == "1" and text[2] == "t 0 10"
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(-2)
    store.close()
    log = open_store().log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    assert log.append(b"next") == 10


def test_delete_records_removes_segments_via_deleted_rename(open_store, data_dir):
    store, log = fresh(open_store, topic_config={"segment.bytes": 1000, "file.delete.delay.ms": 60000})
    for i in range(20):
        log.append_batch(values(10, i * 10))
    n = len(log.segments())
    log.delete_records_before(150)
    part = data_dir / "t-0"
    deleted = [p for p in os.listdir(part) if p.endswith(".deleted")]
    assert deleted and all(int(p[:20]) < 150 for p in deleted)
    assert len(log.segments()) < n
    assert log.purge_deleted(force=True) == len(deleted)
    assert not [p for p in os.listdir(part) if p.endswith(".deleted")]


def test_delete_records_needs_delete_policy(open_store):
    store, log = fresh(open_store, topic_config={"cleanup.policy": "compact"})
    log.append_batch(values(3), keys=[b"a", b"b", b"c"])
    with pytest.raises(PolicyViolationError) as e:
        log.delete_records_before(1)
    assert e.value.code == 44


def test_delete_records_cost_independent_of_data(open_store):
    """O(segments): the call touches no record data (it works with .log files made unreadable)."""
    store, log = fresh(open_store, topic_config={"segment.bytes": 10000, "file.delete.delay.ms": 0})
    for i in range(50):
        log.append_batch(values(50, i * 50))
    before = log.segments()
    log.delete_records_before(1200)
    assert all(s.base_offset <= 1200 for s in log.segments()[:1])
    assert len(log.segments()) < len(before)


# ---------------------------------------------------------------------------------------------------- retention

def test_time_retention_deletes_prefix_only(open_store):
    store, log = fresh(open_store, topic_config={"retention.ms": 1000, "file.delete.delay.ms": 0})
    now = T0 + 100_000
    log.append_batch([b"old1"], timestamps=[now - 5000])
    log.roll()
    log.append_batch([b"new"], timestamps=[now])
    log.roll()
    log.append_batch([b"old2"], timestamps=[now - 5000])  # old, but after a young segment: kept
    log.roll()
    log.append_batch([b"active"], timestamps=[now])
    assert log.run_retention(now_ms=now) == 1
    assert log.log_start_offset == 1
    assert [r.value for r in log.records()] == [b"new", b"old2", b"active"]


def test_size_retention_keeps_at_least_retention_bytes(open_store):
    store, log = fresh(open_store, topic_config={"segment.bytes": 1000, "retention.bytes": 3000,
                                                 "file.delete.delay.ms": 0, "retention.ms": -1})
    for i in range(40):
        log.append_batch(values(10, i * 10))
    log.run_retention()
    assert log.size_in_bytes >= 3000
    assert log.size_in_bytes - log.segments()[0].size < 3000
    assert log.log_start_offset == log.segments()[0].base_offset


def test_retention_of_everything_rolls_first(open_store):
    store, log = fresh(open_store, topic_config={"retention.ms": 10, "file.delete.delay.ms": 0})
    log.append_batch(values(5), timestamps=[T0] * 5)
    assert log.run_retention(now_ms=T0 + 1000) == 1
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)
    assert log.append(b"x") == 5


# ---------------------------------------------------------------------------------------------------- recovery

def test_recovery_truncates_garbage_from_inside_record(open_store, data_dir, unclean):
    """LogSegmentTest.testRecoveryWithCorruptMessage: garbage from a byte inside batch k keeps [0, k)."""
    store, log = fresh(open_store)
    for i in range(50):
        log.append_batch([b"rec%d" % i], timestamps=[T0 + i])
    positions = [p for p, _ in log.segments()[0].batch_positions()]
    store.close()
    unclean(data_dir)
    seg = data_dir / "t-0" / ("%020d.log" % 0)
    k = 37
    with open(seg, "r+b") as f:
        f.seek(positions[k] + 20)
        f.write(os.urandom(200))
    log = open_store().log("t", 0)
    assert log.log_end_offset == k
    assert [r.value for r in log.records()] == [b"rec%d" % i for i in range(k)]
    assert log.append(b"after") == k


def test_recovery_cuts_an_overlapping_segment_at_the_next_ones_start(open_store, data_dir, unclean, caplog):
    """Two segments claiming one offset range (never made by a roll) are named as an overlap, not logged as a gap
    with an inverted range, and the later segment's history wins: the earlier one is cut where the later starts, so
    every offset is read once."""
    store, log = fresh(open_store)
    log.append_batch([b"old%d" % i for i in range(10)])
    log.append_batch([b"old%d" % i for i in range(10, 20)])
    store.close()
    longer = (data_dir / "t-0" / ("%020d.log" % 0)).read_bytes()  # offsets 0-19 in one segment
    store, log = open_store(), None
    store.delete_topic("t")
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append_batch([b"a%d" % i for i in range(10)])
    log.roll()
    log.append_batch([b"b%d" % i for i in range(10)])
    store.close()
    unclean(data_dir)
    (data_dir / "t-0" / ("%020d.log" % 0)).write_bytes(longer)  # segment 0 now ends at 19, segment 10 starts at 10
    with caplog.at_level("ERROR", logger="kafkalog"):
        log = open_store().log("t", 0)
    assert any("overlapping segments" in r.getMessage() for r in caplog.records), caplog.text
    assert not any("gap between segments" in r.getMessage() for r in caplog.records), caplog.text
    assert [r.value for r in log.records()] == [b"old%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]
    assert [r.offset for r in log.records()] == list(range(20))
    assert log.append(b"after") == 20


def test_recovery_of_garbage_tail_and_index(open_store, data_dir, unclean):
    """LogLoaderTest: nonsense appended to the active .log and .index; reopen unclean keeps the records."""
    store, log = fresh(open_store, topic_config={"index.interval.bytes": 1})
    for i in range(30):
        log.append_batch([b"rec%d" % i], timestamps=[T0 + i])
    store.close()
    unclean(data_dir)
    for suffix in (".log", ".index"):
        with open(data_dir / "t-0" / ("%020d%s" % (0, suffix)), "ab") as f:
            f.write(os.urandom(333))
    log = open_store().log("t", 0)
    assert log.log_end_offset == 30
    assert [r.offset for r in log.records()] == list(range(30))
    assert all(log.offset_for_time(T0 + i).offset == i for i in range(30))


@pytest.mark.parametrize("damage", ["delete", "two-bytes"] + ["garbage"] * 6)  # garbage is random: several draws
def test_missing_or_corrupt_indexes_are_rebuilt(open_store, data_dir, unclean, damage):
    store, log = fresh(open_store, topic_config={"segment.bytes": 3000, "index.interval.bytes": 100})
    for i in range(200):
        log.append_batch([b"rec%d" % i], timestamps=[T0 + i * 10])
    nseg = len(log.segments())
    store.close()
    unclean(data_dir)
    part = data_dir / "t-0"
    for name in os.listdir(part):
        if name.endswith((".index", ".timeindex")):
            p = part / name
            if damage == "delete":
                os.unlink(p)
            elif damage == "two-bytes":
                p.write_bytes(b"\x00\x01")
            else:
                p.write_bytes(os.urandom(os.path.getsize(p) or 24))
    log = open_store().log("t", 0)
    assert len(log.segments()) == nseg
    assert [r.offset for r in log.records()] == list(range(200))
    for i in range(0, 200, 7):
        assert ot(log.offset_for_time(T0 + i * 10)) == (i, T0 + i * 10)
        assert log.offset_for_time(T0 + i * 10 - 5).offset == i
        assert next(iter_batches(log.read(i))).base_offset == i


def test_orphan_indexes_and_deleted_leftovers_are_removed(open_store, data_dir):
    store, log = fresh(open_store)
    log.append_batch(values(3))
    store.close()
    part = data_dir / "t-0"
    (part / ("%020d.index" % 5)).write_bytes(b"\x00" * 80)
    (part / ("%020d.timeindex" % 5)).write_bytes(b"\x00" * 120)
    (part / ("%020d.log.deleted" % 99)).write_bytes(b"junk")
    log = open_store().log("t", 0)
    names = os.listdir(part)
    assert not any(n.startswith("%020d" % 5) for n in names)
    assert not any(n.endswith(".deleted") for n in names)
    assert log.append(b"x") == 3


def test_log_end_below_checkpointed_start_starts_fresh(open_store, data_dir, unclean):
    """testLogEndLessThanStartAfterReopen: start offset 4 > LEO after corruption -> one empty segment at 4."""
    store, log = fresh(open_store)
    log.append_batch(values(6))
    log.delete_records_before(4)
    store.close()
    unclean(data_dir)
    with open(data_dir / "t-0" / ("%020d.log" % 0), "r+b") as f:
        f.truncate(30)  # the only batch is now torn: LEO becomes 0 < 4
    log = open_store().log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    segs = log.segments()
    assert len(segs) == 1 and segs[0].base_offset == 4
    assert (data_dir / "t-0" / ("%020d.index" % 4)).exists()
    assert log.append(b"x") == 4


def test_empty_active_segment_without_index_reloads(open_store, data_dir, unclean):
    store, log = fresh(open_store)
    log.append_batch(values(3))
    log.roll()
    store.close()
    part = data_dir / "t-0"
    for suffix in (".index", ".timeindex"):
        os.unlink(part / ("%020d%s" % (3, suffix)))
    log = open_store().log("t", 0)
    assert log.log_end_offset == 3
    assert log.append(b"x") == 3


def test_unclean_open_recovers_only_from_recovery_point(open_store, data_dir, unclean):
    store, log = fresh(open_store, topic_config={"segment.bytes": 2000, "retention.ms": -1})
    for i in range(100):
        log.append_batch([b"rec%d" % i], timestamps=[T0 + i])
    log.flush()
    store.run_maintenance()  # checkpoints the recovery point
    store.close()
    unclean(data_dir)
    # corrupt a batch far below the recovery point: trusted (fsynced), so recovery does not look at it
    first = data_dir / "t-0" / ("%020d.log" % 0)
    size = os.path.getsize(first)
    with open(first, "r+b") as f:
        f.seek(size - 5)
        f.write(b"\xff\xff\xff\xff\xff")
    log = open_store().log("t", 0)
    assert log.log_end_offset == 100


# ---------------------------------------------------------------------------------------------------- store

@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "../escape", "sp ace", "ü", None])
def test_illegal_topic_names(open_store, name):
    store = open_store()
    with pytest.raises(InvalidTopicError) as e:
        store.create_topic(name)
    assert e.value.code == 17


def test_topic_collision_and_duplicates(open_store):
    store = open_store()
    store.create_topic("a.b")
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic("a.b")
    with pytest.raises(InvalidTopicError):
        store.create_topic("a_b")


@pytest.mark.parametrize("config", [{"segment.bytes": 5}, {"retention.ms": -7}, {"bogus.key": 1},
                                    {"message.timestamp.type": "Sometimes"}, {"segment.bytes": "big"},
                                    {"cleanup.policy": "shred"}])
def test_bad_topic_config_names_the_key(open_store, config):
    store = open_store()
    with pytest.raises(InvalidConfigError) as e:
        store.create_topic("t", 1, config)
    assert list(config)[0].split(".")[0] in str(e.value)
    assert "t" not in store.topics()


def test_topic_config_persisted_and_underscores(open_store):
    store = open_store()
    store.create_topic("t", 2, {"segment_bytes": 12345})
    store.close()
    store = open_store()
    assert store.topics() == ["t"]
    assert store.partitions_for("t") == 2
    assert store.topic_config("t")["segment.bytes"] == 12345


def test_unknown_partition_and_closed(open_store):
    store = open_store()
    store.create_topic("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError) as e:
        store.log("t", 2)
    assert e.value.code == 3
    with pytest.raises(UnknownTopicOrPartitionError):
        store.log("nope", 0)
    log = store.log("t", 0)
    store.close()
    with pytest.raises(LogClosedError):
        log.append(b"x")


def test_delete_topic(open_store, data_dir):
    store = open_store()
    store.create_topic("t", 2)
    store.log("t", 1).append_batch(values(3))
    store.delete_topic("t")
    assert store.topics() == []
    assert not (data_dir / "t-0").exists() and not (data_dir / "t-1").exists()
    store.create_topic("t", 1)
    assert store.log("t", 0).log_end_offset == 0


def test_two_stores_keep_one_registry_through_creates_alters_and_deletes(data_dir):
    """Two stores on one data dir (as two processes have) take turns changing the topic registry: each change is
    made on what the other wrote, whatever this store last read or wrote itself (its encoded lines and bytes are
    reused only when they are what the file holds), and a third store opened afterwards reads the same topics."""
    import json
    a = kafkalog.LogStore(data_dir, maintenance=False)
    b = kafkalog.LogStore(data_dir, maintenance=False)
    try:
        a.create_topic("one", 2, config={"retention.ms": 1000})
        b.create_topic("two", 1)
        a.alter_topic_config("two", {"cleanup.policy": "compact"})
        b.create_partitions("one", 3)
        a.create_topic("three", 1)
        b.delete_topic("three")
        b.alter_topic_config("one", {"retention.ms": 2000})
        a.create_topic("four", 4)
        want = {"one": (3, {"retention.ms": 2000}), "two": (1, {"cleanup.policy": "compact"}), "four": (4, {})}
        reader = kafkalog.LogStore(data_dir, read_only=True, maintenance=False)
        try:
            for store in (a, b, reader):
                assert store.topics() == sorted(want)
                for name, (n, overrides) in want.items():
                    assert store.partitions_for(name) == n
                    assert store.topic_config(name).overrides == overrides
        finally:
            reader.close()
        on_disk = json.loads((data_dir / ".kafkalog-topics.json").read_text())
        assert {k: (v["partitions"], v["config"]) for k, v in on_disk.items()} == want
    finally:
        a.close()
        b.close()


def test_a_deleted_topic_never_comes_back_through_another_stores_registry_write(data_dir):
    """Store b lists the data dir (without the registry lock) while store a's delete_topic has written the registry
    without the topic and not renamed its directory yet: b's view holds the topic as a directory-only one. b's next
    registry change must be made on the registry and directories as they are then, never on that view: the deleted
    topic stays deleted (the power-loss soak's topics-create-delete case found it back)."""
    a = kafkalog.LogStore(data_dir, maintenance=False)
    b = kafkalog.LogStore(data_dir, maintenance=False)
    seen = []
    try:
        a.create_topic("gone", 1)
        a.log("gone", 0).append_batch(values(3))
        a.create_topic("kept", 1)
        assert b.topics() == ["gone", "kept"]
        failpoints.enable("delete-topic:after-registry", lambda: seen.append(b.topics()))
        try:
            a.delete_topic("gone")
        finally:
            failpoints.disable("delete-topic:after-registry")
        assert seen == [["gone", "kept"]], "b did not list the directory mid-delete: the test proves nothing"
        b.create_topic("new", 1)
        for store in (a, b):
            assert store.topics() == ["kept", "new"]
        with kafkalog.LogStore(data_dir, read_only=True, maintenance=False) as reader:
            assert reader.topics() == ["kept", "new"]
    finally:
        a.close()
        b.close()


def test_exclusive_store_refuses_second_writer(data_dir, child_env):
    import subprocess
    import sys
    store = kafkalog.LogStore(data_dir, {"lock.timeout.ms": 200}, exclusive=True, maintenance=False)
    try:
        code = ("import kafkalog,sys\n"
                "try:\n kafkalog.LogStore(sys.argv[1], {'lock.timeout.ms': 200})\n"
                "except kafkalog.errors.LockTimeoutError as e:\n print('refused', e); sys.exit(3)\n")
        r = subprocess.run([sys.executable, "-c", code, str(data_dir)], env=child_env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 3, r.stderr
        assert "refused" in r.stdout
    finally:
        store.close()


def test_threads_share_a_log(open_store):
    store, log = fresh(open_store)
    errors = []

    def worker(k):
        try:
            for i in range(300):
                if i % 3 == 0:
                    log.append_batch([b"%d-%d" % (k, i)])
                else:
                    log.append(b"%d-%d" % (k, i))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    recs = list(log.records())
    assert [r.offset for r in recs] == list(range(1200))
    assert sorted(r.value for r in recs) == sorted(b"%d-%d" % (k, i) for k in range(4) for i in range(300))


def test_threads_staged_appends_get_their_own_offsets(open_store):
    """The staged append() path takes no Python lock: each returned offset must hold exactly that record, while
    other threads append batches, read and flush at the same time."""
    store, log = fresh(open_store)
    got = {}
    errors = []

    def appender(k):
        try:
            for i in range(3000):
                v = b"%d-%d" % (k, i)
                got[log.append(v, key=b"k%d" % k)] = v
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def batcher():
        try:
            for i in range(100):
                vals = [b"b-%d-%d" % (i, j) for j in range(7)]
                base = log.append_batch(vals)
                for j, v in enumerate(vals):
                    got[base + j] = v
                if i % 10 == 0:
                    log.flush()
                    len(log.read(0))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=appender, args=(k,)) for k in range(3)] + [threading.Thread(target=batcher)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(got) == 3 * 3000 + 700
    assert {r.offset: r.value for r in log.records()} == got


def test_read_columns_matches_records(open_store):
    store, log = fresh(open_store, topic_config={"segment.bytes": 5000})
    for i in range(30):
        log.append_batch(values(20, i * 20), keys=[None if j % 3 == 0 else b"k%d" % j for j in range(20)],
                         timestamps=[T0 + i * 20 + j for j in range(20)], compression=["none", "lz4"][i % 2])
    cols = log.read_columns(15, 590)
    recs = list(log.records(15, 590))
    assert cols["offset"].tolist() == [r.offset for r in recs]
    assert cols["timestamp"].tolist() == [r.timestamp for r in recs]
    vo, vals = cols["value_offsets"], cols["values"]
    assert [bytes(vals[vo[i]:vo[i + 1]]) for i in range(len(recs))] == [r.value for r in recs]
    ko, keys, kv = cols["key_offsets"], cols["keys"], cols["key_valid"]
    assert [bytes(keys[ko[i]:ko[i + 1]]) if kv[i] else None for i in range(len(recs))] == [r.key for r in recs]
    assert isinstance(cols["offset"], np.ndarray)


# ---------------------------------------------------------------------------------------------------- flush policy

def test_flush_messages_advances_recovery_point(open_store):
    store, log = fresh(open_store, topic_config={"flush.messages": 5})
    log.append_batch(values(3))
    assert log.recovery_point == 0  # not yet: 3 < flush.messages
    log.append_batch(values(3))
    assert log.recovery_point == 6  # fsynced by the policy


def test_flush_ms_runs_from_maintenance(open_store):
    store, log = fresh(open_store, topic_config={"flush.ms": 0})
    log.append(b"staged")
    log.append_batch(values(2))
    assert log.recovery_point == 0
    store.run_maintenance()
    assert log.recovery_point == log.log_end_offset == 3


def test_explicit_flush_and_checkpoint(open_store, data_dir):
    store, log = fresh(open_store)
    log.append(b"x")
    log.flush()
    assert log.recovery_point == 1
    store.run_maintenance()
    assert (data_dir / "recovery-point-offset-checkpoint").read_text().splitlines()[2] == "t 0 1"


def test_reader_of_unrecovered_store_never_sees_a_bad_batch(open_store, data_dir, unclean):
    """A read-only opener after a crash (nobody recovered yet) CRC-checks past the recovery point itself and
    changes no file."""
    store, log = fresh(open_store, topic_config={"retention.ms": -1})
    log.append_batch(values(5), timestamps=[T0 + i for i in range(5)])
    log.flush()
    store.run_maintenance()
    log.append_batch(values(5, 5), timestamps=[T0 + 5 + i for i in range(5)])
    store.close()
    unclean(data_dir)
    seg_path = data_dir / "t-0" / ("%020d.log" % 0)
    good = seg_path.read_bytes()
    bad = bytearray(build_batch([b"evil"], timestamps=[T0 + 99], base_offset=10))
    bad[-1] ^= 0x55  # complete, plausible header, wrong CRC
    seg_path.write_bytes(good + bytes(bad))
    with kafkalog.LogStore(data_dir, read_only=True) as reader:
        rlog = reader.log("t", 0)
        assert rlog.log_end_offset == 10
        assert [r.value for r in rlog.records()] == values(10)
    assert seg_path.read_bytes() == good + bytes(bad)  # a reader never writes
    log = open_store().log("t", 0)  # the next writer recovers for real
    assert log.log_end_offset == 10 and seg_path.read_bytes() == good


def test_staged_batches_fit_small_segments(open_store):
    """append() staging never builds a batch larger than segment.bytes (it would not fit any segment)."""
    store, log = fresh(open_store, topic_config={"segment.bytes": 200})
    offs = [log.append(b"v%d" % i) for i in range(40)]
    assert offs == list(range(40))
    assert log.log_end_offset == 40
    assert [r.value for r in log.records()] == [b"v%d" % i for i in range(40)]
    assert all(s.size <= 200 for s in log.segments())


def test_alter_topic_config_applies_and_persists(open_store):
    store, log = fresh(open_store)
    store.alter_topic_config("t", {"segment.bytes": 1000})
    for i in range(30):
        log.append_batch(values(10, i * 10))
    assert len(log.segments()) > 3
    store.close()
    assert open_store().topic_config("t")["segment.bytes"] == 1000


_SHARED_DELETER = r"""
import json, sys, kafkalog
path, n, me, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = kafkalog.LogStore(path, {"lock.timeout.ms": 20000}, maintenance=False)
log = s.log("t")
got = {}
for i in range(n):
    v = b"%s-%d" % (me.encode(), i)
    got[log.append_batch([v])] = v.decode()
    if i % 7 == 0:
        log.flush()
    if i % 40 == 0:
        end = log.log_end_offset
        log.delete_records_before(end if i % 80 == 0 else max(log.log_start_offset, end - 5))
s.close()
json.dump(got, open(out, "w"))
"""


def test_shared_writers_with_concurrent_delete_before(data_dir, child_env, tmp_path):
    """Three processes append to one partition in shared mode while each keeps deleting before the log end
    (segments roll and vanish under the others): no offset is handed out twice, nothing above the final log start
    offset is lost, every call succeeds."""
    import json
    import subprocess
    import sys
    with kafkalog.LogStore(data_dir, maintenance=False) as s:
        s.create_topic("t", 1, {"segment.bytes": 2000, "file.delete.delay.ms": 0})
    script = tmp_path / "deleter.py"
    script.write_text(_SHARED_DELETER)
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", str(script), str(data_dir), "400", k,
                               str(tmp_path / f"{k}.json")],
                              env=child_env, stderr=subprocess.PIPE, text=True) for k in "abc"]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    handed = {}
    for k in "abc":
        for off, v in json.loads((tmp_path / f"{k}.json").read_text()).items():
            assert int(off) not in handed, f"offset {off} handed out twice"
            handed[int(off)] = v
    assert len(handed) == 1200
    with kafkalog.LogStore(data_dir, read_only=True) as r:
        log = r.log("t")
        lso, leo = log.log_start_offset, log.log_end_offset
        assert leo == 1200
        on_disk = {rec.offset: rec.value.decode() for rec in log.records()}
    assert on_disk == {o: v for o, v in handed.items() if o >= lso}


_ROLLING_WRITER = r"""
import sys, kafkalog
path, n = sys.argv[1], int(sys.argv[2])
with kafkalog.LogStore(path, {"lock.timeout.ms": 20000}, maintenance=False) as s:
    log = s.log("t")
    for i in range(n):
        log.append_batch([b"%06d" % i])
"""


def test_openers_race_a_rolling_writer(data_dir, child_env, tmp_path):
    """A writer in another process rolls a segment every few records (each roll trims the old active's indexes)
    while this process keeps opening the partition read-only and shared: an opener never maps past the end of a
    file that shrank meanwhile, and every view reads a gap-free prefix."""
    import subprocess
    import sys
    with kafkalog.LogStore(data_dir, maintenance=False) as s:
        s.create_topic("t", 1, {"segment.bytes": 300, "segment.index.bytes": 1 << 20, "index.interval.bytes": 1})
    script = tmp_path / "writer.py"
    script.write_text(_ROLLING_WRITER)
    n = 3000
    p = subprocess.Popen([sys.executable, str(script), str(data_dir), str(n)], env=child_env,
                         stderr=subprocess.PIPE, text=True)
    opened = 0
    try:
        while p.poll() is None or opened == 0:
            read_only = opened % 2 == 0
            with kafkalog.LogStore(data_dir, read_only=read_only, exclusive=False, maintenance=False) as r:
                log = r.log("t")
                end = log.log_end_offset
                got = [int(rec.value) for rec in log.records(0, end)]
                assert got == list(range(end))
            opened += 1
    finally:
        _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]
    assert opened > 0


@pytest.mark.parametrize("last", [295_000, 301_000, 60])
def test_a_view_takes_in_every_batch_past_a_read_chunk(open_store, last):
    """Another process's appends of more than one 4 MiB read chunk, the chunk ending inside the last batch of the
    file (smaller or larger than the one before it): a shared writer and a reader take in every batch, and the
    shared writer's next append continues after them (never at an offset already taken)."""
    a = open_store(exclusive=False)
    a.create_topic("t", 1)
    la = a.log("t", 0)
    assert la.log_end_offset == 0
    b = open_store(exclusive=False)
    lb = b.log("t", 0)
    reader = open_store(read_only=True, exclusive=False).log("t", 0)
    assert reader.log_end_offset == 0
    for _ in range(13):
        lb.append_batch([b"x" * 299_900])
    lb.append_batch([b"y" * last])
    assert reader.log_end_offset == 14
    assert la.append_batch([b"z"]) == 14
    assert [len(r.value) for r in la.records()] == [299_900] * 13 + [last, 1]
    assert reader.log_end_offset == 15


# ---------------------------------------------------------------------------------------------------- compaction

@pytest.mark.parametrize("mode", ["exclusive", "shared"])
@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_topic_refuses_records_without_a_key_on_every_append_path(open_store, mode, policy):
    """Kafka's LogValidator: a record without a key cannot be compacted, so the whole append is refused with
    INVALID_RECORD and nothing of it is written; keyed records (tombstones included) go in as usual."""
    store, log = fresh(open_store, topic_config={"cleanup.policy": policy}, exclusive=mode == "exclusive")
    assert log.append(b"v", key=b"k") == 0
    assert log.append(None, key=b"k") == 1  # a tombstone has a key
    keyless = [
        lambda: log.append(b"v"),
        lambda: log.append_batch([b"a", b"b"]),
        lambda: log.append_batch([b"a", b"b"], keys=[b"k", None]),
        lambda: log.append_records(build_batch([b"a", b"b"], [b"k", None], [T0, T0])),
        lambda: log.append_records(build_batch([b"a"], [b"k"], [T0]) + build_batch([b"b"], None, [T0],
                                                                                     compression=3)),
        lambda: log.append_built(bytearray(build_batch([b"a"], None, [T0])), 1, T0),
    ]
    for i, call in enumerate(keyless):
        with pytest.raises(InvalidRecordError, match="without key") as e:
            call()
        assert e.value.code == 87, i
    assert log.append_batch([b"x", b"y"], keys=[b"k1", b"k2"]) == 2
    assert log.append_records(build_batch([b"z"], [b"k3"], [T0], compression=3)) == (4, 4)
    log.flush()
    assert [(r.offset, r.key, r.value) for r in log.records()] == [
        (0, b"k", b"v"), (1, b"k", None), (2, b"k1", b"x"), (3, b"k2", b"y"), (4, b"k3", b"z")]
    # a topic that stops being compacted takes keyless records again
    store.alter_topic_config("t", {"cleanup.policy": "delete"})
    assert store.log("t", 0).append_batch([b"free"]) == 5


# ------------------------------------------------------------------------------------------ other processes' views

# A shared store and a read-only store see another writer's changes at their next call; they take the files in only
# when the partition's change counter moved (.kafkalog-changes), so every writer path that changes what a view must
# see bumps it. The writer here is a second LogStore of this process: the same files, the same counter, as another
# process would have them.

VIEW_MODES = {"shared": {"exclusive": False}, "read_only": {"read_only": True, "exclusive": False}}


def _count_refreshes(log, monkeypatch) -> list:
    """Count how often ``log`` takes the files in (Log._refresh_files)."""
    calls = []
    inner = log._refresh_files

    def counted():
        calls.append(1)
        return inner()
    monkeypatch.setattr(log, "_refresh_files", counted)
    return calls


def _view_state(log):
    """What a view must agree on with the writer: start, end, segments, every record, a time seek of the last one."""
    recs = [(r.offset, r.timestamp, r.value) for r in log.records()]
    seek = ot(log.offset_for_time(recs[-1][1])) if recs else None
    return (log.log_start_offset, log.log_end_offset, [s.base_offset for s in log.segments()], recs, seek)


def _changes(log, writer_store):
    """(name, call) of every writer path that changes what a view must see (``log`` is the writer's Log)."""
    ts = iter(range(T0, T0 + 10**6))

    def staged():
        log.append(b"staged", timestamp=next(ts))
        log.flush()  # an exclusive writer's append() is staged until a flush, a read or 16 KiB

    return [
        ("append", staged if log.mode == "exclusive" else lambda: log.append(b"one", timestamp=next(ts))),
        ("append_batch", lambda: log.append_batch(values(3), timestamps=[next(ts) for _ in range(3)])),
        ("append_records", lambda: log.append_records(build_batch(values(2), timestamps=[next(ts), next(ts)]))),
        ("append_built", lambda: log.append_built(bytearray(build_batch([b"built"], timestamps=[next(ts)])), 1,
                                                  T0)),
        ("roll", log.roll),
        ("append after roll", lambda: log.append_batch(values(2), timestamps=[next(ts), next(ts)])),
        ("delete_records_before", lambda: log.delete_records_before(log.log_end_offset - 2)),
        ("appends to retain", lambda: (writer_store.alter_topic_config("t", {"retention.bytes": 1}),
                                       log.append_batch(values(4), timestamps=[next(ts) for _ in range(4)]),
                                       log.roll())),
        ("retention", log.run_retention),
        ("abort marker", lambda: (log.append_records(build_batch([b"txn"], timestamps=[next(ts)], producer_id=9,
                                                                 producer_epoch=0, is_transactional=True)),
                                  log.append_marker(9, 0, False))),
    ]


@pytest.mark.parametrize("view_mode", list(VIEW_MODES))
@pytest.mark.parametrize("writer_mode", ["shared", "exclusive"])
def test_a_view_sees_every_change_of_another_writer_at_its_next_call(open_store, monkeypatch, writer_mode,
                                                                     view_mode):
    """Every writer path that changes the files (appends of each kind, roll, delete-before, retention, a transaction
    marker) is seen by a shared and a read-only view at its next call, with one look at the files; between changes
    the view takes nothing in again, however often it reads."""
    if writer_mode == "exclusive" and view_mode == "shared":
        pytest.skip("an exclusive writer excludes shared ones")
    store = open_store(exclusive=writer_mode == "exclusive")
    store.create_topic("t", 1, {"segment.bytes": 4096})
    log = store.log("t", 0)
    log.append_batch(values(5), timestamps=[T0 - 10 + i for i in range(5)])
    log.flush()
    view = open_store(**VIEW_MODES[view_mode]).log("t", 0)
    assert _view_state(view) == _view_state(log)
    refreshes = _count_refreshes(view, monkeypatch)
    for _ in range(50):  # unchanged: one memory load a call, no look at the files
        view.log_end_offset, view.read(0), view.fetch(0, 100), view.offset_for_time(T0), view.has_data_after(5)
        list(view.records(0))
    assert refreshes == []
    for name, change in _changes(log, store):
        change()
        want = _view_state(log)
        refreshes.clear()
        assert _view_state(view) == want, f"the view missed the writer's {name}"
        assert len(refreshes) == 1, (name, len(refreshes))  # the first call took it in, the others had nothing new
    assert log.log_start_offset > 0 and len(log.segments()) > 1


@pytest.mark.parametrize("view_mode", list(VIEW_MODES))
def test_a_view_sees_another_writers_cleaner_swap_at_its_next_call(open_store, view_mode):
    """Log compaction swaps cleaned segments in for old ones (renames under the partition lock): a view that read
    the old segments just before sees the cleaned log at its next call, nothing else having changed in between."""
    store = open_store(exclusive=False)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 1200, "file.delete.delay.ms": 0,
                                "min.cleanable.dirty.ratio": "0.01"})
    log = store.log("t", 0)
    for i in range(300):
        log.append(b"v%d" % i, key=b"k%d" % (i % 3), timestamp=T0 + i)
    log.roll()
    view = open_store(**VIEW_MODES[view_mode]).log("t", 0)
    assert len(list(view.records())) == 300
    assert log.run_cleaner(force=True).records_removed == 297
    want = [(r.offset, r.value) for r in log.records()]
    assert [(r.offset, r.value) for r in view.records()] == want == [(297, b"v297"), (298, b"v298"),
                                                                     (299, b"v299")]
    assert ot(view.offset_for_time(T0)) == (297, T0 + 297)


@pytest.mark.parametrize("view_mode", list(VIEW_MODES))
def test_a_view_never_takes_a_torn_tail_and_sees_what_replaces_it(open_store, data_dir, view_mode):
    """A writer killed mid-append leaves part of a batch (it never counted a change); the next writer cuts it under
    the partition lock and appends: the view never shows the torn bytes, and sees the new batch where they were."""
    store = open_store(exclusive=False)
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append_batch(values(4))
    view = open_store(**VIEW_MODES[view_mode]).log("t", 0)
    assert view.log_end_offset == 4
    seg = data_dir / "t-0" / ("%020d.log" % 0)
    torn = build_batch([b"torn" * 50], base_offset=4)
    with open(seg, "ab") as f:
        f.write(torn[:len(torn) // 2])
    assert view.log_end_offset == 4 and [r.value for r in view.records()] == values(4)
    assert log.append_batch([b"after"]) == 4  # cuts the torn half first
    assert seg.stat().st_size == log.segments()[-1].size
    assert view.log_end_offset == 5
    assert [r.value for r in view.records()] == values(4) + [b"after"]


def test_a_view_of_a_deleted_topic_stops_trusting_its_counter(open_store):
    """delete_topic retires the partition's change counter before the directory goes: views of it in other
    processes (which nobody will count changes for again) take the files in at every call, as before the counter;
    a topic created again under the name has a new counter its new views trust."""
    store = open_store(exclusive=False)
    store.create_topic("t", 1)
    store.log("t", 0).append_batch(values(3))
    view = open_store(**VIEW_MODES["read_only"]).log("t", 0)
    assert view.log_end_offset == 3 and view._changes.unchanged()
    old = view._changes
    store.delete_topic("t")
    assert old.retired
    assert view.log_end_offset == 3  # the old files, as a view of a deleted topic always had them
    assert not view._changes.trusted and not view._changes.unchanged()
    store.create_topic("t", 1)
    store.log("t", 0).append_batch([b"new"])
    fresh_view = open_store(**VIEW_MODES["read_only"]).log("t", 0)
    assert [r.value for r in fresh_view.records()] == [b"new"] and fresh_view._changes.unchanged()


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "retired"])
@pytest.mark.parametrize("view_mode", list(VIEW_MODES))
def test_without_a_valid_counter_views_refresh_every_call_until_a_writer_repairs_it(open_store, data_dir,
                                                                                    monkeypatch, damage, view_mode):
    """The counter is a hint, never durable state: missing (a power loss took it, an older kafkalog wrote the
    partition), cut short, garbage or retired by a cut-off delete, a read-only view refreshes at every call and sees
    every change; a writer that opens the partition repairs it in place (a new file would leave views that mapped the
    old one waiting) and views trust it again."""
    store = open_store(exclusive=False)
    store.create_topic("t", 1)
    store.log("t", 0).append_batch(values(2))
    store.close()
    path = data_dir / "t-0" / ".kafkalog-changes"
    if damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(os.urandom(64))
    else:
        from kafkalog.storage.log import retire_changes
        retire_changes(data_dir / "t-0")
    reader = open_store(**VIEW_MODES["read_only"]).log("t", 0)
    assert reader._changes is None
    refreshes = _count_refreshes(reader, monkeypatch)
    assert reader.log_end_offset == 2 and reader.log_end_offset == 2
    assert len(refreshes) == 2  # no counter: every call looks at the files
    writer = open_store(exclusive=False).log("t", 0)  # repairs the counter in place
    view = open_store(**VIEW_MODES[view_mode]).log("t", 0)
    assert view._changes is not None and view._changes.unchanged()
    writer.append_batch([b"x"])
    assert reader.log_end_offset == 3 and view.log_end_offset == 3
    refreshes.clear()
    assert reader.log_end_offset == 3  # the reader saw the partition change: it maps the counter again
    assert reader._changes is not None and reader._changes.unchanged()
    writer.append_batch([b"y"])
    assert [r.value for r in reader.records()] == values(2) + [b"x", b"y"]
    assert [r.value for r in view.records()] == values(2) + [b"x", b"y"]
    assert path.stat().st_size == 64


def test_has_data_after_sees_another_writers_append_through_the_counter(open_store):
    store = open_store(exclusive=False)
    store.create_topic("t", 1)
    log = store.log("t", 0)
    view = open_store(**VIEW_MODES["read_only"]).log("t", 0)
    assert not view.has_data_after(0)
    log.append(b"a")
    assert view.has_data_after(0)
    assert view.read(0) and not view.has_data_after(1)


_VIEW_CHILD = r"""
import json, sys, kafkalog
path, mode = sys.argv[1], sys.argv[2]
store = kafkalog.LogStore(path, read_only=mode == "read_only", exclusive=False, maintenance=False)
log = store.log("t", 0)
for line in sys.stdin:  # one look a line: what this process's view shows now
    recs = [(r.offset, r.timestamp, r.value.decode()) for r in log.records()]
    seek = log.offset_for_time(recs[-1][1]) if recs else None
    print(json.dumps([log.log_start_offset, log.log_end_offset, [s.base_offset for s in log.segments()], recs,
                      [seek.offset, seek.timestamp] if seek else None]), flush=True)
store.close()
"""


@pytest.mark.parametrize("view_mode", list(VIEW_MODES))
def test_a_view_in_another_process_sees_every_change_at_its_next_look(open_store, data_dir, tmp_path, child_env,
                                                                      view_mode):
    """The same as above across processes (the counter is a shared mapping of one file): a view in a child process,
    asked to look after each of this process's changes returned, shows exactly what the writer has."""
    import json
    import subprocess
    import sys
    store = open_store(exclusive=False)
    store.create_topic("t", 1, {"segment.bytes": 4096})
    log = store.log("t", 0)
    log.append_batch(values(5), timestamps=[T0 - 10 + i for i in range(5)])
    script = tmp_path / "view.py"
    script.write_text(_VIEW_CHILD)
    p = subprocess.Popen([sys.executable, str(script), str(data_dir), view_mode], env=child_env, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def look():
        p.stdin.write("look\n")
        p.stdin.flush()
        line = p.stdout.readline()
        assert line, p.stderr.read()[-3000:]
        lso, leo, bases, recs, seek = json.loads(line)
        return lso, leo, bases, [tuple(r) for r in recs], tuple(seek) if seek else None

    def mine():
        lso, leo, bases, recs, seek = _view_state(log)
        return lso, leo, bases, [(o, t, v.decode()) for o, t, v in recs], seek

    try:
        assert look() == mine()
        for name, change in _changes(log, store):
            change()
            assert look() == mine(), f"the other process's view missed this process's {name}"
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert p.returncode == 0, p.stderr.read()[-3000:]


def test_a_view_of_an_unclean_store_sees_what_the_recovering_writer_cut(open_store, data_dir, unclean):
    """A read-only view of a store nobody recovered yet takes in every CRC-valid batch, one that repeats offsets
    already taken too; the next writer's recovery cuts from there (offsets must go up) and counts the change at
    its open: the view, which saw the batch, shows the cut log at its next call."""
    store, log = fresh(open_store, topic_config={"retention.ms": -1})
    log.append_batch(values(5), timestamps=[T0 + i for i in range(5)])
    store.close()
    unclean(data_dir)
    (data_dir / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")  # as if never flushed
    seg = data_dir / "t-0" / ("%020d.log" % 0)
    good = seg.read_bytes()
    seg.write_bytes(good + build_batch([b"again"], timestamps=[T0 + 9], base_offset=4))  # offset 4 a second time
    reader = open_store(**VIEW_MODES["read_only"]).log("t", 0)
    assert [r.value for r in reader.records()][-1] == b"again"  # CRC-valid: a view takes it in
    assert reader.log_end_offset == 5
    writer = open_store().log("t", 0)  # exclusive: recovers
    assert seg.read_bytes() == good
    # the view must not read the cut bytes through its mapping (zeros here; past the file's last page, SIGBUS)
    assert [s.size for s in reader.segments()] == [len(good)]
    assert [r.value for r in reader.records()] == values(5)
    assert ot(reader.offset_for_time(T0 + 9)) is None
    writer.append_batch([b"next"], timestamps=[T0 + 20])
    writer.flush()
    assert [r.value for r in reader.records()] == values(5) + [b"next"]


def _lying(monkeypatch, times: int, start_too: bool):
    """The next ``times`` directory listings of a Log say it holds no segment (and, with ``start_too``, its
    checkpointed log start reads as 0): the view a writer took in two kept power-loss soak failures of the shared
    writers (worker 0's first append after its open got offset 0 in a log of thousands)."""
    from kafkalog.storage.checkpoints import Checkpoints
    from kafkalog.storage.log import Log
    left = {"n": times}
    real_list, real_start = Log._list_bases, Checkpoints.log_start

    def list_bases(self):
        if left["n"] > 0:
            left["n"] -= 1
            real_list(self)  # keeps _swapped as a real listing sets it
            return []
        return real_list(self)

    def log_start(self, topic, partition):
        return 0 if (start_too and left["n"] > 0) else real_start(self, topic, partition)

    monkeypatch.setattr(Log, "_list_bases", list_bases)
    monkeypatch.setattr(Checkpoints, "log_start", log_start)
    return left


@pytest.mark.parametrize("lies", [1, 5])
def test_a_shared_writer_whose_listing_misses_the_segments_looks_again_before_it_appends(open_store, data_dir,
                                                                                         monkeypatch, caplog, lies):
    """The log end of a running store never goes back, and every writer publishes it (the change counter's End, under
    the store's session): a shared writer whose listing shows none of the segments (and whose log start read as 0)
    must not start a fresh segment 0 and hand out offsets another writer already did; it names the problem and
    lists again until its view reaches the published end."""
    a = open_store(exclusive=False)
    a.create_topic("t", 1, {"segment.bytes": 2000, "file.delete.delay.ms": 0})
    log = a.log("t", 0)
    for _ in range(30):
        log.append_batch(values(3))
    log.flush()
    assert log.delete_records_before(60) == 60 and not (data_dir / "t-0" / ("%020d.log" % 0)).exists()
    b = open_store(exclusive=False)
    left = _lying(monkeypatch, lies, start_too=True)
    with caplog.at_level(logging.ERROR, logger="kafkalog"):
        late = b.log("t", 0)
    assert left["n"] == 0
    assert "published the log end 90" in caplog.text
    assert late.log_start_offset == 60 and late.log_end_offset == 90
    assert late.append_batch([b"next"]) == 90
    assert not (data_dir / "t-0" / ("%020d.log" % 0)).exists()
    assert [r.offset for r in log.records()][-2:] == [89, 90]


def test_a_shared_writer_refuses_to_append_when_its_listing_keeps_missing_the_segments(open_store, data_dir,
                                                                                       monkeypatch):
    a = open_store(exclusive=False)
    a.create_topic("t", 1, {"segment.bytes": 2000, "file.delete.delay.ms": 0})
    log = a.log("t", 0)
    for _ in range(30):
        log.append_batch(values(3))
    log.delete_records_before(60)
    b = open_store(exclusive=False)
    _lying(monkeypatch, 1000, start_too=True)
    monkeypatch.setattr("kafkalog.storage.log.Log._LOOKS", 3)
    with pytest.raises(KafkaStorageError, match="below the log end 90 another writer made visible") as e:
        b.log("t", 0)
    assert e.value.errno == errno.EIO
    monkeypatch.undo()
    assert not (data_dir / "t-0" / ("%020d.log" % 0)).exists()  # nothing started at 0
    assert log.append_batch([b"next"]) == 90 and [r.offset for r in log.records()][0] == 60


def test_a_shared_writer_whose_view_went_stale_reloads_before_it_cuts_or_appends(open_store, data_dir,
                                                                                 monkeypatch):
    """At append time the same check runs before a torn tail is cut: bytes past a view that ends below the published
    end are another writer's batches, never a torn tail."""
    from kafkalog.storage.log import Log
    a = open_store(exclusive=False)
    a.create_topic("t", 1)
    wa = a.log("t", 0)
    wb = open_store(exclusive=False).log("t", 0)
    wa.append_batch(values(4))
    assert wb.log_end_offset == 4
    wa.append_batch(values(5))  # b's view must take these in before its append
    monkeypatch.setattr(Log, "_refresh", lambda self: None)  # a refresh that missed them
    assert wb.append_batch([b"b"]) == 9
    monkeypatch.undo()
    assert [r.offset for r in wa.records()] == list(range(10))
    assert [r.value for r in wa.records()][4:] == values(5) + [b"b"]


def test_the_published_end_of_an_earlier_session_is_never_compared(open_store, data_dir):
    """A crash can lose offsets a writer published (never fsynced): the next first opener draws a new session, so
    the ends published before never make a writer refuse."""
    a = open_store(exclusive=False)
    a.create_topic("t", 1)
    a.log("t", 0).append_batch(values(4))
    counter = a.log("t", 0)._changes
    session = a._session
    assert counter.published_end(session) == 4
    counter.publish_end(1000, session)  # as if offsets up to 1000 had been appended and then lost with a crash
    a.close()
    b = open_store(exclusive=False)
    assert b._session not in (0, session)
    log = b.log("t", 0)
    assert log._changes.published_end(b._session) == -1  # nothing published in this session yet
    assert log.append_batch([b"x"]) == 4
    assert log._changes.published_end(b._session) == 5 and log._changes.published_end(session) == -1
    c = open_store(exclusive=False)  # a later opener of the same session reads it
    assert c._session == b._session and c.log("t", 0).append_batch([b"y"]) == 5


@pytest.mark.parametrize("view_mode", ["shared", "read_only"])
def test_a_view_that_missed_another_writers_rolls_takes_in_the_published_end(open_store, monkeypatch, view_mode):
    """A view follows another writer's rolls by looking up the next segment's file; a lookup that missed it (seen
    under the power-loss soak) left the view's log end behind, hiding records. The writers' published end (the
    change counter, their session) makes the view list the segments again."""
    import kafkalog.storage.log as logmod
    w = open_store(exclusive=False)
    w.create_topic("t", 1)
    log = w.log("t", 0)
    log.append_batch(values(3))
    view = open_store(**VIEW_MODES[view_mode]).log("t", 0)
    assert view.log_end_offset == 3
    for _ in range(12):
        log.roll()
        log.append_batch(values(3))
    assert len(log.segments()) == 13
    monkeypatch.setattr(logmod, "_segment_exists", lambda p: False)  # every lookup of a next segment misses it
    assert view.log_end_offset == log.log_end_offset == 39
    monkeypatch.undo()
    assert [r.offset for r in view.records()] == list(range(39))


@pytest.mark.parametrize("view_mode", ["shared", "read_only"])
def test_a_failed_lookup_of_the_next_segment_is_an_error_not_the_end_of_the_log(open_store, view_mode):
    """A view follows another writer's roll by looking the next segment's file up. A look that fails (EIO, ESTALE,
    a mount gone: the failpoint raises EIO) is KafkaStorageError for the call, never taken for "no roll": a view
    that stopped there would hide records, and a shared writer would hand out offsets another writer gave."""
    w = open_store(exclusive=False)
    w.create_topic("t", 1)
    log = w.log("t", 0)
    log.append_batch(values(3))
    view = open_store(**VIEW_MODES[view_mode]).log("t", 0)
    assert view.log_end_offset == 3
    log.roll()
    log.append_batch(values(4))
    failpoints.enable("refresh:look-next-segment", "raise")
    try:
        with pytest.raises(KafkaStorageError) as e:
            _ = view.log_end_offset
        assert e.value.errno == errno.EIO
    finally:
        failpoints.disable()
    assert view.log_end_offset == log.log_end_offset == 7
    assert [r.offset for r in view.records()] == list(range(7))


def test_a_reader_racing_with_an_append_is_not_taken_for_one_that_missed_a_roll(open_store, monkeypatch, caplog):
    """The writers publish their end once the append is in the files; a lock-free reader compares its view with
    the end published before it looked at the files: an append that lands between its look and the comparison is
    taken in by its next refresh, never answered by listing the segments again."""
    import kafkalog.storage.log as logmod
    w = open_store(exclusive=False)
    w.create_topic("t", 1)
    log = w.log("t", 0)
    log.append_batch(values(3))
    view = open_store(**VIEW_MODES["read_only"]).log("t", 0)
    assert view.log_end_offset == 3
    log.append_batch(values(2))
    real = logmod.Log._refresh_files
    reloads = []
    monkeypatch.setattr(logmod.Log, "_reload_segments", lambda self: reloads.append(1))

    def refresh_then_append(self):
        real(self)
        if self is view and not reloads and log.log_end_offset == 5:
            log.append_batch(values(4))  # lands after the view's look at the files
    monkeypatch.setattr(logmod.Log, "_refresh_files", refresh_then_append)
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        assert view.log_end_offset == 5
    assert reloads == [] and "listing the segments again" not in caplog.text
    monkeypatch.undo()
    assert view.log_end_offset == 9


def test_delete_before_after_a_deleter_killed_before_it_counted(data_dir, child_env):
    """Another process's delete_records_before checkpoints the new log start and dies (kill -9) before it counts
    the change: this store's view, current by the change counter, never took that start in. Its own
    delete_records_before of a lower offset must leave the start where the checkpoint has it, never lower."""
    import subprocess
    import sys
    store = kafkalog.LogStore(data_dir, maintenance=False)
    try:
        store.create_topic("t", 1, {"segment.bytes": 1024})
        log = store.log("t", 0)
        for i in range(40):
            log.append_batch([b"%03d" % i + b"x" * 100])
        log.flush()
        assert len(log.segments()) > 3
        ready, go = data_dir / "ready", data_dir / "go"
        code = ("import kafkalog, os, sys, time\n"
                "s = kafkalog.LogStore(sys.argv[1], maintenance=False)\n"
                "log = s.log('t', 0)\n"  # opening counts a change: the parent takes it in before the delete
                "open(sys.argv[2], 'w').close()\n"
                "for _ in range(6000):\n"
                "    if os.path.exists(sys.argv[3]):\n"
                "        break\n"
                "    time.sleep(0.01)\n"
                "log.delete_records_before(30)\n")
        child = subprocess.Popen([sys.executable, "-c", code, str(data_dir), str(ready), str(go)],
                                 env=dict(child_env, KAFKALOG_FAILPOINTS="delete-records:before-count=kill"))
        try:
            for _ in range(6000):
                if ready.exists() or child.poll() is not None:
                    break
                time.sleep(0.01)
            assert ready.exists(), f"the deleter did not open the log (exit {child.poll()})"
            assert log.log_end_offset == 40 and next(iter(log.records())).offset == 0  # the view takes the open in
            assert log._changes.unchanged(), "the view is not current by the counter: the test proves nothing"
            go.touch()
            assert child.wait(timeout=60) == -9
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert log._changes.unchanged(), "the deleter counted its change: the test proves nothing"
        assert log.delete_records_before(10) == 30
        assert log.log_start_offset == 30
        assert next(iter(log.records())).offset == 30
    finally:
        store.close()
