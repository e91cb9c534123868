"""OffsetStore: committed offsets in ``__consumer_offsets`` with Kafka's record schemas, snapshots, truncation,
several processes, and kill -9.

Records on disk are checked with an independent reader: kafka-python's record-batch parser for the batches and a
parser of OffsetCommitKey/OffsetCommitValue written here from Kafka's JSON schemas. Crash rounds replay with
``KAFKALOG_CRASH_SEED`` (the seed is in every failure message); ``KAFKALOG_OFFSETS_KILL_ROUNDS`` sets the number of
random-kill rounds (each kills one or two committing processes).
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

import kafkalog
from kafkalog import OffsetAndMetadata, TopicPartition
from kafkalog.errors import KafkaStorageError, LogClosedError
from kafkalog.storage.offsets import (
    OFFSETS_TOPIC,
    SNAPSHOT_FILE,
    OffsetMetadataTooLargeError,
    OffsetsKey,
    OffsetStore,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)

T0 = 1_700_000_000_000
TP = TopicPartition
SEED = int(os.environ.get("KAFKALOG_CRASH_SEED", str(random.SystemRandom().randrange(2**31))))
KILL_ROUNDS = int(os.environ.get("KAFKALOG_OFFSETS_KILL_ROUNDS", "12"))


def _part_dir(data_dir: Path, partition: int = 0) -> Path:
    return Path(data_dir) / f"{OFFSETS_TOPIC}-{partition}"


# ------------------------------------------------------------------------------------------ independent reader

def _kstring(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    return buf[pos + 2:pos + 2 + n].decode("utf-8"), pos + 2 + n


def _spec_key(key: bytes):
    """OffsetCommitKey (version 0/1): version int16, group string, topic string, partition int32.
    GroupMetadataKey (version 2): version int16, group string."""
    (version,) = struct.unpack_from(">h", key, 0)
    group, pos = _kstring(key, 2)
    if version == 2:
        assert pos == len(key)
        return version, group, None, None
    topic, pos = _kstring(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    assert pos + 4 == len(key), "trailing bytes after the key"
    return version, group, topic, partition


def _spec_value_v3(value: bytes):
    """OffsetCommitValue version 3: version int16, offset int64, leaderEpoch int32, metadata string,
    commitTimestamp int64."""
    version, offset, epoch = struct.unpack_from(">hqi", value, 0)
    metadata, pos = _kstring(value, 14)
    (ts,) = struct.unpack_from(">q", value, pos)
    assert pos + 8 == len(value), "trailing bytes after the value"
    return version, offset, epoch, metadata, ts


def _disk_records(data_dir: Path, partition: int = 0) -> list:
    """Every record in the partition's .log files, read by kafka-python (the store must be closed)."""
    out = []
    d = _part_dir(data_dir, partition)
    for f in sorted(d.glob("*.log")):
        records = MemoryRecords(f.read_bytes())
        while True:
            batch = records.next_batch()
            if batch is None:
                break
            assert batch.validate_crc()
            out.append(("batch", batch.base_offset, batch.records_count))
            for r in batch:
                out.append((r.offset, r.timestamp, r.key, r.value))
    return out


def _records_only(disk):
    return [r for r in disk if r[0] != "batch"]


# ---------------------------------------------------------------------------------------------------- golden bytes

GOLDEN_KEYS = [
    (("g", "t", 0), "0001" "0001" "67" "0001" "74" "00000000"),
    (("group-1", "topic", 7), "0001" "0007" + b"group-1".hex() + "0005" + b"topic".hex() + "00000007"),
    (("é", "a.b_c-d", 2**31 - 1), "0001" "0002" "c3a9" "0007" + b"a.b_c-d".hex() + "7fffffff"),
]

GOLDEN_VALUES = [
    ((5, "", None, T0), "0003" "0000000000000005" "ffffffff" "0000" "0000018bcfe56800"),
    ((2**63 - 1, "hé", 7, 0), "0003" "7fffffffffffffff" "00000007" "0003" "68c3a9" "0000000000000000"),
    ((0, "m", 0, -1), "0003" "0000000000000000" "00000000" "0001" "6d" "ffffffffffffffff"),
]


@pytest.mark.parametrize("args, hexbytes", GOLDEN_KEYS)
def test_offset_commit_key_golden_bytes(args, hexbytes):
    data = encode_offset_commit_key(*args)
    assert data.hex() == hexbytes
    assert decode_key(data) == OffsetsKey(1, *args)
    assert _spec_key(data) == (1, *args)


@pytest.mark.parametrize("args, hexbytes", GOLDEN_VALUES)
def test_offset_commit_value_golden_bytes(args, hexbytes):
    offset, metadata, epoch, ts = args
    data = encode_offset_commit_value(offset, metadata, epoch, ts)
    assert data.hex() == hexbytes
    assert decode_offset_commit_value(data) == (OffsetAndMetadata(offset, metadata, epoch), ts)
    assert _spec_value_v3(data) == (3, offset, -1 if epoch is None else epoch, metadata, ts)


def test_group_metadata_key_golden_bytes():
    assert encode_group_metadata_key("g").hex() == "0002" "0001" "67"
    assert decode_key(bytes.fromhex("000200026767")) == OffsetsKey(2, "gg")


# Values as older and newer Kafka versions wrote them (hand-built from OffsetCommitValue.json)
OLD_VALUES = [
    ("v0", "0000" "000000000000002a" "0002" "6d64" "0000018bcfe56800", (42, "md", None, T0)),
    ("v1 expire ts", "0001" "000000000000002a" "0000" "0000018bcfe56800" "0000018bcfe56801", (42, "", None, T0)),
    ("v2", "0002" "0000000000000001" "0001" "78" "0000000000000009", (1, "x", None, 9)),
    ("v3 epoch", "0003" "0000000000000001" "00000005" "0000" "0000000000000009", (1, "", 5, 9)),
    ("v4 flexible", "0004" "0000000000000003" "ffffffff" "03" "6162" "0000000000000009" "00", (3, "ab", None, 9)),
    ("v4 empty metadata", "0004" "0000000000000003" "00000002" "01" "0000000000000009" "00", (3, "", 2, 9)),
]


@pytest.mark.parametrize("name, hexbytes, expected", OLD_VALUES, ids=[v[0] for v in OLD_VALUES])
def test_decodes_every_offset_commit_value_version(name, hexbytes, expected):
    offset, metadata, epoch, ts = expected
    assert decode_offset_commit_value(bytes.fromhex(hexbytes)) == (OffsetAndMetadata(offset, metadata, epoch), ts)


def test_decodes_key_version_0_and_rejects_garbage():
    assert decode_key(bytes.fromhex("0000" "0001" "67" "0001" "74" "00000003")) == OffsetsKey(0, "g", "t", 3)
    for bad in (b"", b"\x00", bytes.fromhex("0001" "0009" "67"), bytes.fromhex("ffff0001")):
        with pytest.raises(ValueError):
            decode_key(bad)
    with pytest.raises(ValueError):
        decode_offset_commit_value(bytes.fromhex("0009" "0000000000000001"))


JAVA_HASHES = [
    ("", 0),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0
    ("\U0001F600", 31 * 0xD83D + 0xDE00),  # a surrogate pair: two UTF-16 units
]


@pytest.mark.parametrize("s, h", JAVA_HASHES)
def test_java_string_hash(s, h):
    assert java_string_hash(s) == h


def test_partition_for_is_kafkas_mapping():
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Aa", 7) == partition_for("BB", 7) == 2112 % 7
    assert all(partition_for(f"g{i}", 1) == 0 for i in range(20))


# ---------------------------------------------------------------------------------------------------- API

def test_round_trip_and_reopen(data_dir, open_store):
    store = open_store()
    offsets = OffsetStore(store)
    assert offsets.committed("g", TP("t", 0)) is None
    assert offsets.groups() == []
    assert OFFSETS_TOPIC not in store.topics()  # created on first use, not on open
    offsets.commit("g", {TP("t", 0): 5, TP("t", 1): OffsetAndMetadata(7, "meta", 3), ("u", 2): 9})
    expected = {TP("t", 0): OffsetAndMetadata(5, "", None), TP("t", 1): OffsetAndMetadata(7, "meta", 3),
                TP("u", 2): OffsetAndMetadata(9, "", None)}
    assert offsets.committed_all("g") == expected
    assert offsets.committed("g", TP("t", 1)) == OffsetAndMetadata(7, "meta", 3)
    assert offsets.committed("g", ("u", 2)).offset == 9
    assert offsets.committed("other", TP("t", 0)) is None
    offsets.commit("g", {TP("t", 0): 6})
    offsets.commit("h", {TP("t", 0): 1}, sync=False)
    assert offsets.committed("g", TP("t", 0)).offset == 6
    assert offsets.groups() == ["g", "h"]
    assert store.partitions_for(OFFSETS_TOPIC) == 1
    store.close()
    store = open_store()
    offsets = OffsetStore(store)
    expected[TP("t", 0)] = OffsetAndMetadata(6, "", None)
    assert offsets.committed_all("g") == expected
    assert offsets.committed_all("h") == {TP("t", 0): OffsetAndMetadata(1, "", None)}
    assert offsets.groups() == ["g", "h"]


def test_constructor_settings_are_validated(open_store):
    store = open_store()
    for kw in ({"num_partitions": 0}, {"num_partitions": True}, {"snapshot_interval_records": 0},
               {"snapshot_interval_bytes": -1}, {"max_metadata_size": -1}, {"num_partitions": "3"}):
        with pytest.raises(ValueError):
            OffsetStore(store, **kw)
    offsets = OffsetStore(store, max_metadata_size=0)
    offsets.commit("g", {TP("t", 0): 1})
    with pytest.raises(OffsetMetadataTooLargeError):
        offsets.commit("g", {TP("t", 0): OffsetAndMetadata(2, "x", None)})
    offsets.close()
    with pytest.raises(LogClosedError):
        offsets.committed("g", TP("t", 0))


def test_accepts_kafka_python_offset_and_metadata(open_store):
    from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata
    from kafka.structs import TopicPartition as KpTopicPartition
    offsets = OffsetStore(open_store())
    offsets.commit("g", {KpTopicPartition("t", 0): KpOffsetAndMetadata(11, "kp", -1)})
    assert offsets.committed("g", TP("t", 0)) == OffsetAndMetadata(11, "kp", None)


METADATA = ["", "plain", "ünïcödé ß", "emoji \U0001F600 and 中文", "line\nbreak\ttab", "nul\x00inside", "x" * 4096,
            "\U0001F600" * 2048]


def test_metadata_strings_survive_replay_and_snapshot(data_dir, open_store):
    store = open_store()
    offsets = OffsetStore(store)
    tps = {TP("t", i): OffsetAndMetadata(i, m, None) for i, m in enumerate(METADATA)}
    offsets.commit("g", tps)
    assert offsets.committed_all("g") == tps
    store.close()
    store = open_store()
    assert OffsetStore(store).committed_all("g") == tps  # from the log
    OffsetStore(store).snapshot()
    store.close()
    values = [_spec_value_v3(r[3])[3] for r in _records_only(_disk_records(data_dir))]
    assert values == []  # truncated below the snapshot: what follows comes from the snapshot alone
    store = open_store()
    offsets = OffsetStore(store)
    assert offsets.committed_all("g") == tps
    assert offsets.stats()[0]["records_replayed"] == 0


def test_metadata_too_large_and_invalid_commits_write_nothing(open_store):
    store = open_store()
    offsets = OffsetStore(store)
    offsets.commit("g", {TP("t", 0): 1})
    end = store.log(OFFSETS_TOPIC).log_end_offset
    with pytest.raises(OffsetMetadataTooLargeError) as e:
        offsets.commit("g", {TP("t", 0): 2, TP("t", 1): OffsetAndMetadata(2, "x" * 4097, None)})
    assert e.value.code == 12
    # Kafka counts UTF-16 units: 2048 emoji are 4096 units (accepted above), 2049 are too many
    with pytest.raises(OffsetMetadataTooLargeError):
        offsets.commit("g", {TP("t", 0): OffsetAndMetadata(2, "\U0001F600" * 2049, None)})
    bad = [({TP("t", 0): -1}, ValueError), ({TP("t", 0): True}, TypeError), ({TP("t", 0): "5"}, TypeError),
           ({TP("", 0): 1}, ValueError), ({TP("t", -1): 1}, ValueError), ({"t": 1}, TypeError),
           ({TP("t", 0): OffsetAndMetadata(1, b"bytes", None)}, TypeError),
           ({TP("t", 0): OffsetAndMetadata(1, "", 2**31)}, ValueError)]
    for commit, exc in bad:
        with pytest.raises(exc):
            offsets.commit("g", commit)
    offsets.commit("g", {})  # nothing to commit: no batch
    assert store.log(OFFSETS_TOPIC).log_end_offset == end
    assert offsets.committed_all("g") == {TP("t", 0): OffsetAndMetadata(1, "", None)}
    offsets.commit("", {TP("t", 0): 2})  # Kafka allows the empty group id in OffsetCommit/OffsetFetch
    assert offsets.committed("", TP("t", 0)).offset == 2
    small = OffsetStore(store, max_metadata_size=3)
    with pytest.raises(OffsetMetadataTooLargeError):
        small.commit("g", {TP("t", 0): OffsetAndMetadata(1, "four", None)})


def test_sync_commits_and_snapshots_cover_only_fsynced_records(data_dir, open_store):
    """What the durability promise rests on (a power loss cannot be staged here): the log's recovery point (what
    is fsynced) reaches the commit before a sync commit returns, and a snapshot never covers more than it."""
    store = open_store()
    offsets = OffsetStore(store, snapshot_interval_records=4)
    offsets.commit("g", {TP("t", 0): 1}, sync=False)
    log = store.log(OFFSETS_TOPIC)
    assert log.recovery_point < log.log_end_offset == 1  # in the page cache only
    offsets.commit("g", {TP("t", 0): 2}, sync=True)
    assert log.recovery_point == log.log_end_offset == 2
    offsets.commit("g", {TP("t", 0): 3, TP("t", 1): 3}, sync=False)  # the 4th record: a snapshot at X = 4
    assert offsets.stats()[0]["snapshot_offset"] == 4
    assert log.recovery_point >= 4


def test_one_commit_is_one_batch_of_kafka_records(data_dir, open_store):
    """What is on disk decodes with Kafka's schemas (kafka-python reads the batches, the parser above the values)."""
    store = open_store()
    offsets = OffsetStore(store)
    before = int(time.time() * 1000)
    offsets.commit("grp", {TP("t", 0): OffsetAndMetadata(10, "m0", 4), TP("t", 1): 11, TP("u", 5): 12})
    offsets.commit("other", {TP("t", 0): 1})
    offsets.delete_group("other")
    after = int(time.time() * 1000)
    store.close()
    disk = _disk_records(data_dir)
    batches = [r for r in disk if r[0] == "batch"]
    assert [(b[1], b[2]) for b in batches] == [(0, 3), (3, 1), (4, 1)]  # one batch per call, all-or-nothing
    recs = _records_only(disk)
    decoded = []
    for offset, ts, key, value in recs:
        version, group, topic, partition = _spec_key(key)
        assert version == 1
        if value is None:
            decoded.append((offset, group, topic, partition, None))
            continue
        vversion, off, epoch, metadata, commit_ts = _spec_value_v3(value)
        assert vversion == 3
        assert before <= commit_ts <= after and ts == commit_ts  # record timestamp = commit timestamp
        decoded.append((offset, group, topic, partition, (off, epoch, metadata)))
    assert decoded == [
        (0, "grp", "t", 0, (10, 4, "m0")),
        (1, "grp", "t", 1, (11, -1, "")),
        (2, "grp", "u", 5, (12, -1, "")),
        (3, "other", "t", 0, (1, -1, "")),
        (4, "other", "t", 0, None),  # tombstone: null value
    ]


def test_tombstones(data_dir, open_store):
    store = open_store()
    offsets = OffsetStore(store, truncate=False)
    offsets.commit("g", {TP("t", 0): 1, TP("t", 1): 2, TP("t", 2): 3})
    offsets.commit("h", {TP("t", 0): 4})
    offsets.put_group_metadata("g", b"\x00\x03opaque")
    assert offsets.group_metadata("g") == b"\x00\x03opaque"
    offsets.delete_offsets("g", [TP("t", 1), TP("t", 9)])  # t-9 has no offset: no tombstone for it
    assert offsets.committed_all("g") == {TP("t", 0): OffsetAndMetadata(1, "", None),
                                          TP("t", 2): OffsetAndMetadata(3, "", None)}
    offsets.delete_group("g")
    assert offsets.committed_all("g") == {} and offsets.committed("g", TP("t", 0)) is None
    assert offsets.group_metadata("g") is None
    assert offsets.groups() == ["h"]
    offsets.delete_group("nobody")  # unknown group: nothing written
    store.close()
    recs = _records_only(_disk_records(data_dir))
    tombstones = [_spec_key(r[2]) for r in recs if r[3] is None]
    assert tombstones == [(1, "g", "t", 1), (1, "g", "t", 0), (1, "g", "t", 2), (2, "g", None, None)]
    # replay from the log start
    store = open_store()
    offsets = OffsetStore(store, truncate=False)
    assert offsets.groups() == ["h"] and offsets.committed_all("g") == {}
    # through a snapshot, and a commit after the delete starts the group again
    offsets.snapshot()
    offsets.commit("g", {TP("t", 1): 5})
    store.close()
    store = open_store()
    offsets = OffsetStore(store)
    assert offsets.groups() == ["g", "h"]
    assert offsets.committed_all("g") == {TP("t", 1): OffsetAndMetadata(5, "", None)}


def test_group_records_are_kept_verbatim_through_snapshots(open_store):
    """The extension point for membership: key versions >= 2 are latest-per-key state that snapshots carry."""
    store = open_store()
    offsets = OffsetStore(store, snapshot_interval_records=3)
    offsets.put_group_metadata("g", b"gen-1")
    offsets.put_group_metadata("g", b"gen-2")
    # a KIP-848 record (ConsumerGroupMetadataKey, version 3: group id first) written by Kafka itself
    k848 = bytes.fromhex("0003" "0001" "67")
    store.log(OFFSETS_TOPIC).append_batch([b"epoch-7"], [k848])
    offsets.commit("g", {TP("t", 0): 1})
    for i in range(5):
        offsets.commit("x", {TP("t", 0): i})
    assert offsets.group_records("g") == {encode_group_metadata_key("g"): b"gen-2", k848: b"epoch-7"}
    store.close()
    store = open_store()
    offsets = OffsetStore(store)
    assert offsets.stats()[0]["log_start_offset"] > 4  # the group records now live in the snapshot only
    assert offsets.group_metadata("g") == b"gen-2"
    assert offsets.group_records("g")[k848] == b"epoch-7"
    assert offsets.groups() == ["g", "x"]
    offsets.delete_group("g")
    assert offsets.group_records("g") == {} and offsets.groups() == ["x"]


def test_bad_records_are_skipped_not_fatal(open_store):
    store = open_store()
    offsets = OffsetStore(store)
    offsets.commit("g", {TP("t", 0): 1})
    store.log(OFFSETS_TOPIC).append_batch([b"junk", b"v"], [b"\x00\x01\xff", b"\x00"])  # keyed: it is compacted
    offsets.commit("g", {TP("t", 1): 2})
    store.close()
    assert OffsetStore(open_store()).committed_all("g") == {TP("t", 0): OffsetAndMetadata(1, "", None),
                                                             TP("t", 1): OffsetAndMetadata(2, "", None)}


# ---------------------------------------------------------------------------------------------------- snapshots

def _commit_round(offsets, n, start=0, groups=5):
    for i in range(start, start + n):
        g = f"g{i % groups}"
        offsets.commit(g, {TP("t", 0): i, TP("t", 1): i, TP("u", 0): OffsetAndMetadata(i, f"m{i % 10}", 1)},
                       sync=False)


def _expected_after(n, groups=5):
    out = {}
    for g in range(groups):
        last = max(i for i in range(n) if i % groups == g)
        out[f"g{g}"] = {TP("t", 0): OffsetAndMetadata(last, "", None), TP("t", 1): OffsetAndMetadata(last, "", None),
                        TP("u", 0): OffsetAndMetadata(last, f"m{last % 10}", 1)}
    return out


def test_snapshots_keep_the_topic_small_and_open_cost_flat(data_dir, open_store):
    interval = 500
    opened = {}
    done = 0
    for total in (1000, 10_000):
        store = open_store()
        offsets = OffsetStore(store, snapshot_interval_records=interval)
        _commit_round(offsets, total - done, done)
        done = total
        store.close()
        files = sorted(p.name for p in _part_dir(data_dir).iterdir())
        assert not [f for f in files if f.endswith((".deleted", ".tmp"))], files
        assert len([f for f in files if f.endswith(".log")]) == 1, files
        on_disk = _records_only(_disk_records(data_dir))
        assert len(on_disk) < interval + 3, f"{len(on_disk)} records on disk after {total} commits"
        store = open_store()
        offsets = OffsetStore(store, snapshot_interval_records=interval)
        assert {g: offsets.committed_all(g) for g in offsets.groups()} == _expected_after(total)
        st = offsets.stats()[0]
        assert st["log_end_offset"] == 3 * total
        opened[total] = (st["records_replayed"], (_part_dir(data_dir) / SNAPSHOT_FILE).stat().st_size)
        store.close()
    # what an open reads does not grow with history: at most one interval of records, and a snapshot whose size
    # depends on the live (group, partition) count only
    assert opened[10_000][0] < interval + 3 and opened[1000][0] < interval + 3, opened
    assert opened[10_000][1] == opened[1000][1], opened


def test_no_truncation_keeps_history_but_open_still_replays_one_interval(data_dir, open_store):
    store = open_store()
    offsets = OffsetStore(store, snapshot_interval_records=100, truncate=False)
    _commit_round(offsets, 300)
    store.close()
    assert len(_records_only(_disk_records(data_dir))) == 900
    store = open_store()
    offsets = OffsetStore(store)
    assert {g: offsets.committed_all(g) for g in offsets.groups()} == _expected_after(300)
    assert offsets.stats()[0]["records_replayed"] < 100


@pytest.mark.parametrize("damage", ["garbage", "torn", "empty", "bit flip", "missing", "beyond log end"])
def test_damaged_snapshot_falls_back_to_the_log(data_dir, open_store, damage, caplog):
    store = open_store()
    offsets = OffsetStore(store, snapshot_interval_records=30, truncate=False)
    _commit_round(offsets, 100)
    store.close()
    snap = _part_dir(data_dir) / SNAPSHOT_FILE
    data = snap.read_bytes()
    assert data[:8] == b"KLOFFSET"
    if damage == "garbage":
        snap.write_bytes(os.urandom(len(data)))
    elif damage == "torn":
        snap.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        snap.write_bytes(b"")
    elif damage == "bit flip":
        snap.write_bytes(data[:40] + bytes([data[40] ^ 1]) + data[41:])
    elif damage == "missing":
        snap.unlink()
    else:  # a valid snapshot at an offset the log does not reach (e.g. the log was restored from an older copy)
        body = bytearray(data[14:])
        body[0:8] = struct.pack(">q", 10**6)
        from kafkalog._engine.batch import crc32c
        snap.write_bytes(data[:10] + struct.pack(">I", crc32c(bytes(body))) + bytes(body))
    store = open_store()
    offsets = OffsetStore(store, snapshot_interval_records=10**6)
    assert {g: offsets.committed_all(g) for g in offsets.groups()} == _expected_after(100)
    assert offsets.stats()[0]["records_replayed"] == 300  # the whole log: the snapshot was not used


def test_stale_reader_reloads_after_another_truncates(data_dir, open_store):
    """A reader whose next record was deleted below a newer snapshot loads that snapshot (never skips records)."""
    store = open_store()
    reader = OffsetStore(store)
    reader.commit("g0", {TP("t", 0): 0})
    writer = OffsetStore(store, snapshot_interval_records=20)
    _commit_round(writer, 200)
    assert store.log(OFFSETS_TOPIC).log_start_offset > 1
    assert {g: reader.committed_all(g) for g in reader.groups()} == _expected_after(200)
    # a stale writer's snapshot never replaces a newer one with older state
    reader.snapshot()
    store.close()
    store = open_store()
    assert {g: OffsetStore(store).committed_all(g) for g in ("g0", "g4")} == \
        {g: _expected_after(200)[g] for g in ("g0", "g4")}


def test_existing_multi_partition_topic_uses_kafkas_group_mapping(data_dir, open_store):
    store = open_store()
    offsets = OffsetStore(store, num_partitions=3)
    groups = [f"grp-{i}" for i in range(12)]
    for i, g in enumerate(groups):
        offsets.commit(g, {TP("t", 0): i})
    assert store.partitions_for(OFFSETS_TOPIC) == 3
    assert offsets.partition_for("hello") == 99162322 % 3
    store.close()
    for p in range(3):
        keys = [_spec_key(r[2])[1] for r in _records_only(_disk_records(data_dir, p))]
        assert keys == [g for g in groups if abs(java_string_hash(g)) % 3 == p]
    store = open_store()
    offsets = OffsetStore(store)  # the default of 1 partition only applies to a topic it creates
    assert offsets.groups() == sorted(groups)
    assert [offsets.committed(g, TP("t", 0)).offset for g in groups] == list(range(12))


def test_threads_share_one_store(open_store):
    store = open_store()
    offsets = OffsetStore(store, snapshot_interval_records=50)
    errors = []

    def work(t):
        try:
            for i in range(200):
                offsets.commit(f"own-{t}", {TP("t", i % 3): i}, sync=False)
                offsets.commit("shared", {TP(f"t{t}", 0): i}, sync=False)
                assert offsets.committed("shared", TP(f"t{t}", 0)).offset == i
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for t in range(4):
        assert offsets.committed_all(f"own-{t}") == {
            TP("t", k): OffsetAndMetadata(max(i for i in range(200) if i % 3 == k), "", None) for k in range(3)}
    assert offsets.committed_all("shared") == {TP(f"t{t}", 0): OffsetAndMetadata(199, "", None) for t in range(4)}


# ---------------------------------------------------------------------------------------------------- shared stores

def test_two_shared_openers_see_each_others_commits_on_the_next_call(data_dir):
    """Two shared-mode LogStores on one dir (separate files and locks, as two processes have)."""
    a = kafkalog.LogStore(data_dir, maintenance=False)
    b = kafkalog.LogStore(data_dir, maintenance=False)
    try:
        oa, ob = OffsetStore(a, snapshot_interval_records=10), OffsetStore(b, snapshot_interval_records=10)
        assert ob.committed("g", TP("t", 0)) is None
        oa.commit("g", {TP("t", 0): 1})
        assert ob.committed("g", TP("t", 0)).offset == 1
        ob.commit("g", {TP("t", 1): 2})
        assert oa.committed_all("g") == {TP("t", 0): OffsetAndMetadata(1, "", None),
                                         TP("t", 1): OffsetAndMetadata(2, "", None)}
        for i in range(60):  # interleaved, with snapshots written by both
            (oa if i % 3 else ob).commit("g", {TP("t", 0): 10 + i}, sync=False)
            assert oa.committed("g", TP("t", 0)).offset == ob.committed("g", TP("t", 0)).offset == 10 + i
        ob.delete_group("g")
        assert oa.groups() == [] and oa.committed("g", TP("t", 1)) is None
    finally:
        a.close()
        b.close()


def test_read_only_store_serves_offsets_beside_a_writer(data_dir, open_store):
    writer = open_store()
    offsets = OffsetStore(writer, snapshot_interval_records=10)
    reader_store = kafkalog.LogStore(data_dir, read_only=True)
    try:
        reader = OffsetStore(reader_store)
        assert reader.groups() == [] and reader.committed("g", TP("t", 0)) is None  # no topic yet
        offsets.commit("g", {TP("t", 0): 1})
        assert reader.committed("g", TP("t", 0)).offset == 1
        for i in range(5):
            offsets.commit("g", {TP("t", 0): 2 + i})
        assert reader.committed("g", TP("t", 0)).offset == 6
        with pytest.raises(KafkaStorageError):
            reader.commit("g", {TP("t", 0): 9})
        with pytest.raises(KafkaStorageError):
            reader.delete_group("g")
    finally:
        reader_store.close()


def test_shared_mode_truncation_with_a_stale_second_writer(data_dir):
    a = kafkalog.LogStore(data_dir, maintenance=False)
    b = kafkalog.LogStore(data_dir, maintenance=False)
    try:
        oa = OffsetStore(a, snapshot_interval_records=5, truncate=True)
        ob = OffsetStore(b, snapshot_interval_records=10**6, truncate=True)
        oa.commit("g", {TP("t", 0): 0})
        ob.commit("h", {TP("t", 0): 0})
        for i in range(1, 12):
            oa.commit("g", {TP("t", 0): i})
        ob.commit("h", {TP("t", 0): 99})
    finally:
        a.close()
        b.close()
    with kafkalog.LogStore(data_dir, exclusive=True, maintenance=False) as store:
        assert OffsetStore(store).committed("h", TP("t", 0)).offset == 99


def test_read_only_reader_follows_the_writers_truncation(data_dir, open_store):
    writer = open_store()
    offsets = OffsetStore(writer, snapshot_interval_records=4)
    offsets.commit("g", {TP("t", 0): 0})
    reader_store = kafkalog.LogStore(data_dir, read_only=True)
    try:
        reader = OffsetStore(reader_store)
        assert reader.committed("g", TP("t", 0)).offset == 0
        for i in range(1, 10):
            offsets.commit("g", {TP("t", 0): i})
        assert writer.log(OFFSETS_TOPIC).log_start_offset > 0
        assert reader.committed("g", TP("t", 0)).offset == 9
    finally:
        reader_store.close()


# ---------------------------------------------------------------------------------------------------- processes

_CHILD = r"""
import json, os, random, sys, time
import kafkalog
from kafkalog import OffsetAndMetadata, TopicPartition
from kafkalog.storage.offsets import OffsetStore


def commit_loop(path, mode, name, start, ack, interval, seed, limit):
    rnd = random.Random(seed)
    store = kafkalog.LogStore(path, {"lock.timeout.ms": 20000}, exclusive=mode == "exclusive", maintenance=False)
    offsets = OffsetStore(store, snapshot_interval_records=interval)
    fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    print("ready", flush=True)
    value = start
    for _ in range(limit):
        group = f"{name}-g{rnd.randrange(4)}"
        os.write(fd, f"T {group} {value}\n".encode())
        om = OffsetAndMetadata(value, f"v{value}", None)
        offsets.commit(group, {TopicPartition("t", k): om for k in range(3)}, sync=value % 3 != 0)
        os.write(fd, f"A {group} {value}\n".encode())
        value += 1
    store.close()


def concurrent(path, name, other, n, interval, go):
    store = kafkalog.LogStore(path, {"lock.timeout.ms": 20000}, maintenance=False)
    offsets = OffsetStore(store, snapshot_interval_records=interval)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(n):
        offsets.commit(f"own-{name}", {TopicPartition("t", i % 4): i})
        offsets.commit("both", {TopicPartition(name, 0): OffsetAndMetadata(i, f"{name}{i}", None)}, sync=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = offsets.committed("both", TopicPartition(other, 0))
        if seen is not None and seen.offset == n - 1:
            break
        time.sleep(0.002)
    out = {g: sorted([tp.topic, tp.partition, om.offset, om.metadata] for tp, om in offsets.committed_all(g).items())
           for g in offsets.groups()}
    print(json.dumps(out), flush=True)
    store.close()


spec = json.loads(sys.argv[1])
globals()[spec.pop("fn")](**spec)
"""


def _spawn(spec: dict, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)


def _wait_ready(proc: subprocess.Popen, what: str) -> None:
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"{what} did not start: {line!r}\n{err}")


def test_two_processes_committing_concurrently_see_all_commits(data_dir, child_env, tmp_path):
    n = 300
    data_dir.mkdir(parents=True)
    go = tmp_path / "go"
    procs = {name: _spawn({"fn": "concurrent", "path": str(data_dir), "name": name, "other": other, "n": n,
                           "interval": 37, "go": str(go)}, child_env)
             for name, other in (("A", "B"), ("B", "A"))}
    for name, p in procs.items():
        _wait_ready(p, name)
    go.touch()
    outs = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs[name] = json.loads(out)
    expected = {f"own-{x}": sorted([["t", k, max(i for i in range(n) if i % 4 == k), ""] for k in range(4)])
                for x in "AB"}
    expected["both"] = sorted([[x, 0, n - 1, f"{x}{n - 1}"] for x in "AB"])
    assert outs["A"] == expected
    assert outs["B"] == expected
    with kafkalog.LogStore(data_dir, exclusive=True, maintenance=False) as store:
        offsets = OffsetStore(store)
        assert offsets.stats()[0]["log_end_offset"] == 4 * n  # every commit of both processes, none lost
        assert offsets.committed("both", TP("A", 0)) == OffsetAndMetadata(n - 1, f"A{n - 1}", None)


def _read_acks(path: Path) -> tuple[dict, dict]:
    tried, acked = {}, {}
    if path.exists():
        for line in path.read_text().splitlines(keepends=True):
            if not line.endswith("\n"):
                continue
            kind, group, value = line.split()
            (tried if kind == "T" else acked)[group] = int(value)
    return tried, acked


def _verify_after_kill(data_dir: Path, ack_files: list[Path], floor: dict, context: str) -> None:
    """Every acknowledged commit is there with its latest value, or the in-flight one; never an older value; all
    partitions of a commit agree (one batch); nothing appears that was never committed."""
    tried, acked = {}, {}
    for f in ack_files:
        t, a = _read_acks(f)
        tried.update(t)
        acked.update(a)
    with kafkalog.LogStore(data_dir, exclusive=True, maintenance=False) as store:
        offsets = OffsetStore(store, snapshot_interval_records=5)  # reopening may snapshot and truncate too
        state = {g: offsets.committed_all(g) for g in offsets.groups()}
    for g in sorted(set(floor) | set(tried)):
        least = acked.get(g, floor.get(g, -1))
        allowed = {least}
        if tried.get(g, -1) > least:
            allowed.add(tried[g])  # killed between the append and the acknowledgement
        got = state.get(g)
        if allowed == {-1}:
            assert got is None, f"{context}: group {g} was never committed but has {got}"
            continue
        if got is None:
            assert -1 in allowed, f"{context}: group {g} lost (acknowledged {least})"
            continue
        values = {om.offset for om in got.values()}
        assert len(got) == 3 and len(values) == 1, f"{context}: torn commit for {g}: {got}"
        v = values.pop()
        assert v in allowed, f"{context}: {g} has {v}, expected one of {sorted(allowed)}"
        assert all(om.metadata == f"v{v}" for om in got.values()), f"{context}: {g}: {got}"
        floor[g] = v
    assert set(state) <= set(floor), f"{context}: unexpected groups {set(state) - set(floor)}"


def test_sigkill_at_random_points_keeps_every_acknowledged_commit(data_dir, child_env, tmp_path):
    rnd = random.Random(SEED)
    data_dir.mkdir(parents=True)
    floor: dict[str, int] = {}
    start = 0
    kills = acked = 0
    for r in range(KILL_ROUNDS):
        mode = "exclusive" if r % 2 == 0 else "shared"
        names = ["a"] if mode == "exclusive" else ["a", "b"]
        procs, acks = [], []
        for name in names:
            ack = tmp_path / f"acks-{r}-{name}.log"
            spec = {"fn": "commit_loop", "path": str(data_dir), "mode": mode, "name": name, "start": start,
                    "ack": str(ack), "interval": rnd.choice([3, 7, 20]), "seed": rnd.randrange(2**30),
                    "limit": 10**7}
            start += 10**7  # every child's values are above all earlier ones
            procs.append(_spawn(spec, child_env))
            acks.append(ack)
        for p in procs:
            _wait_ready(p, f"seed {SEED} round {r}")
        for p in procs:
            time.sleep(rnd.uniform(0.01, 0.3))
            p.kill()
        for p in procs:
            _, err = p.communicate()
            assert p.returncode == -9, f"seed {SEED} round {r}: the child failed by itself:\n{err}"
            kills += 1
        acked += sum(len(_read_acks(a)[1]) for a in acks)  # a kill may also land before the first commit
        _verify_after_kill(data_dir, acks, floor, f"seed {SEED} round {r} ({mode})")
    assert kills >= 10
    assert acked >= KILL_ROUNDS, f"seed {SEED}: too few commits between the kills to test anything"


FAILPOINTS = ["offsets:before-snapshot", "offsets-snapshot:before-fsync", "offsets-snapshot:before-rename",
              "offsets:after-snapshot", "checkpoint:before-rename", "delete-records:after-checkpoint",
              "delete:after-rename", "roll:after-trim", "append:after-write", "flush:after-fsync"]


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_kill_at_each_step_of_snapshot_and_truncation(data_dir, open_store, child_env, tmp_path, failpoint):
    store = open_store()
    offsets = OffsetStore(store, snapshot_interval_records=5)
    floor = {}
    for i in range(12):  # earlier history: snapshots and truncations already happened
        g = f"a-g{i % 4}"
        offsets.commit(g, {TP("t", k): OffsetAndMetadata(i, f"v{i}", None) for k in range(3)})
        floor[g] = i
    store.close()  # the child owns the store now
    ack = tmp_path / "acks.log"
    env = dict(child_env, KAFKALOG_FAILPOINTS=f"{failpoint}=kill")
    p = _spawn({"fn": "commit_loop", "path": str(data_dir), "mode": "exclusive", "name": "a", "start": 100,
                "ack": str(ack), "interval": 5, "seed": 1, "limit": 200}, env)
    out, err = p.communicate(timeout=60)
    assert p.returncode == -9, f"{failpoint} was never reached:\n{err}"
    _verify_after_kill(data_dir, [ack], floor, failpoint)
