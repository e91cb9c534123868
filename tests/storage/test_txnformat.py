"""Kafka's transaction byte formats (storage/txnformat.py): ``__transaction_state`` keys and values (v0, v1 with
tagged fields), end-transaction marker batches, ``.txnindex`` files and producer-state ``.snapshot`` files.

Golden bytes come from Kafka 4.4.0's own serializers (``MessageUtil.toVersionPrefixedByteBuffer`` of the generated
``TransactionLogKey``/``TransactionLogValue``, ``MemoryRecords.withEndTransactionMarker``,
``ProducerStateManager.writeSnapshot``), run once on the lab's jars; the marker is also the 78-byte example of
shared/reference/kafka-transactions.md section 2. The last test has Apache Kafka's kafka-dump-log read a segment
directory written here (skipped when the lab's Kafka is not installed, as tests/test_children.py does).
"""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

from kafkalog._engine.batch import RecordBatch, build_batch, crc32c, iter_batches
from kafkalog.errors import CorruptIndexError, CorruptRecordError, InvalidRecordError, KafkaError
from kafkalog.storage.txnformat import (
    STATE_NAMES,
    AbortedTxn,
    CorruptSnapshotError,
    ProducerSnapshotEntry,
    TxnIndex,
    TxnLogValue,
    build_marker_batch,
    decode_producer_snapshot,
    decode_txn_log_key,
    decode_txn_log_value,
    encode_producer_snapshot,
    encode_txn_log_key,
    encode_txn_log_value,
    marker_of_batch,
    parse_marker,
    snapshot_path,
    txn_index_path,
)

REPO = Path(__file__).resolve().parents[2]


def _hex(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", "").replace("\n", ""))


# --------------------------------------------------------------------------------------- __transaction_state

def test_state_names_are_kafkas():
    assert STATE_NAMES == {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                           5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}


def test_key_golden_and_back():
    assert encode_txn_log_key("tx") == _hex("0000 0002 7478")
    assert decode_txn_log_key(_hex("0000 0002 7478")) == "tx"
    assert decode_txn_log_key(encode_txn_log_key("é-id")) == "é-id"


@pytest.mark.parametrize("key", [_hex("0001 0002 7478"), _hex("0003 0002 7478"), _hex("ffff 0002 7478")])
def test_key_of_another_record_type_is_not_a_transaction_key(key):
    assert decode_txn_log_key(key) is None


@pytest.mark.parametrize("key", [b"", b"\x00", b"\x00\x00", b"\x00\x00\x00\x02\x74", b"\x00\x00\xff\xff",
                                 b"\x00\x00\x00\x01\xff"])
def test_truncated_or_bad_key_is_corrupt(key):
    with pytest.raises(CorruptRecordError, match="__transaction_state key"):
        decode_txn_log_key(key)


def test_key_refuses_empty_and_oversized_ids():
    with pytest.raises(ValueError, match="empty"):
        encode_txn_log_key("")
    with pytest.raises(ValueError, match="32767"):
        encode_txn_log_key("x" * 32768)


# (name, value, version, Kafka 4.4.0's bytes, value decoded from them)
V1_EXAMPLE = TxnLogValue(1000, 2, 60000, 1, {"t": [0]}, 5, 4, client_tv=2)
BIG = TxnLogValue(5000, 32766, 900000, 2, {"ab": [0, 3], "é": [2]}, 1700000000000, 1699999999000)
BIG_TAGGED = TxnLogValue(5000, 32766, 900000, 2, {"ab": [0, 3], "é": [2]}, 1700000000000, 1699999999000,
                         prev_producer_id=4000, next_producer_id=6000, client_tv=2, next_producer_epoch=0)
EMPTY = TxnLogValue(7, 0, 60000, 0, None, 99, -1)
COMPLETED = TxnLogValue(1, 1, 1, 4, {}, 1, 1)

VALUE_GOLDEN = [
    # the reference's section-2 example (pid 1000, epoch 2, 60 s, Ongoing, t-0, clientTV 2). The reference prints
    # "... 00000000 00 00 0000000000000005 ...": one 00 too many (48 bytes); Kafka's serializer writes these 47
    ("reference v1 example", V1_EXAMPLE, 1,
     "0001 00000000000003e8 0002 0000ea60 01 02 0274 02 00000000 00 0000000000000005 0000000000000004 01 02 02 0002",
     V1_EXAMPLE),
    ("v0 Empty: null array", EMPTY, 0,
     "0000 0000000000000007 0000 0000ea60 00 ffffffff 0000000000000063 ffffffffffffffff", EMPTY),
    ("v1 Empty: null array, no tagged fields", EMPTY, 1,
     "0001 0000000000000007 0000 0000ea60 00 00 0000000000000063 ffffffffffffffff 00", EMPTY),
    ("v0 two topics", BIG, 0,
     "0000 0000000000001388 7ffe 000dbba0 02 00000002 0002 6162 00000002 00000000 00000003 0002 c3a9 00000001 "
     "00000002 0000018bcfe56800 0000018bcfe56418", BIG),
    ("v1 two topics, every tagged field", BIG_TAGGED, 1,
     "0001 0000000000001388 7ffe 000dbba0 02 03 03 6162 03 00000000 00000003 00 03 c3a9 02 00000002 00 "
     "0000018bcfe56800 0000018bcfe56418 04 00 08 0000000000000fa0 01 08 0000000000001770 02 02 0002 03 02 0000",
     BIG_TAGGED),
    ("v0 CompleteCommit: empty array, not null", COMPLETED, 0,
     "0000 0000000000000001 0001 00000001 04 00000000 0000000000000001 0000000000000001", COMPLETED),
    ("v1 CompleteCommit: empty array, not null", COMPLETED, 1,
     "0001 0000000000000001 0001 00000001 04 01 0000000000000001 0000000000000001 00", COMPLETED),
]


@pytest.mark.parametrize("name, value, version, data, decoded", VALUE_GOLDEN, ids=[g[0] for g in VALUE_GOLDEN])
def test_value_golden_bytes(name, value, version, data, decoded):
    assert encode_txn_log_value(value, version).hex() == _hex(data).hex()
    assert decode_txn_log_value(_hex(data)) == decoded


def test_empty_state_writes_a_null_array_whatever_it_is_given():
    for version in (0, 1):
        a = encode_txn_log_value(TxnLogValue(7, 0, 60000, 0, {}, 99, -1), version)
        assert a == encode_txn_log_value(EMPTY, version)
        assert decode_txn_log_value(a).partitions is None


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("value", [
    TxnLogValue(0, 0, 1, 1, {"a": []}, 0, 0),
    TxnLogValue(2**63 - 1, 32767, 2**31 - 1, 3, {"x" * 300: list(range(200)), "y": [2**31 - 1, -1]}, -1, -1),
    TxnLogValue(-1, -1, 0, 5, {"t": [1, 0]}, 2**63 - 1, -(2**63)),
    TxnLogValue(9, 1, 100, 7, {"z": [4], "a": [3]}, 10, 9),
])
def test_value_round_trip(version, value):
    data = encode_txn_log_value(value, version)
    assert decode_txn_log_value(data) == value
    assert decode_txn_log_value(data + b"\x01\x02") == value  # bytes after the value: ignored, as Kafka does


@pytest.mark.parametrize("field, default, other", [("prev_producer_id", -1, 0), ("next_producer_id", -1, 2**40),
                                                   ("client_tv", 0, 1), ("next_producer_epoch", -1, 32767)])
def test_v1_tagged_field_written_only_when_not_default(field, default, other):
    base = TxnLogValue(1, 1, 1, 1, {"t": [0]}, 1, 1)
    plain = encode_txn_log_value(base, 1)
    assert plain.endswith(b"\x00")  # no tagged fields
    tagged = TxnLogValue(1, 1, 1, 1, {"t": [0]}, 1, 1, **{field: other})
    data = encode_txn_log_value(tagged, 1)
    assert len(data) > len(plain)
    assert decode_txn_log_value(data) == tagged
    assert getattr(decode_txn_log_value(plain), field) == default
    with pytest.raises(ValueError, match=f"v0 cannot carry {field}"):
        encode_txn_log_value(tagged, 0)


def test_v1_unknown_tagged_fields_are_skipped():
    # tag 9 (4 bytes) after the known ones at the end of the value; tag 5 (1 byte) in the partition struct
    data = _hex("0001 00000000000003e8 0002 0000ea60 01 02 0274 02 00000000 01 05 01 ff "
                "0000000000000005 0000000000000004 02 02 02 0002 09 04 deadbeef")
    assert decode_txn_log_value(data) == V1_EXAMPLE


@pytest.mark.parametrize("data", [_hex("0002 0000000000000001"), _hex("7fff"), _hex("ffff 0000"),
                                  _hex("0002" + "00" * 40)])
def test_unknown_value_version_is_skipped(data):
    assert decode_txn_log_value(data) is None


@pytest.mark.parametrize("name, value, version, data, decoded", VALUE_GOLDEN, ids=[g[0] for g in VALUE_GOLDEN])
def test_every_truncation_is_corrupt(name, value, version, data, decoded):
    full = _hex(data)
    for n in range(len(full)):
        with pytest.raises(CorruptRecordError, match="TransactionLogValue"):
            decode_txn_log_value(full[:n])


@pytest.mark.parametrize("data, problem", [
    ("0000 0000000000000001 0001 00000001 08 ffffffff 0000000000000001 0000000000000001", "unknown transaction state"),
    ("0000 0000000000000001 0001 00000001 01 00000001 ffff", "topic is null"),
    ("0000 0000000000000001 0001 00000001 01 00000001 0001 74 ffffffff", "partition ids"),
    ("0001 0000000000000001 0001 00000001 01 02 00 01 00 0000000000000001 0000000000000001 00", "topic is null"),
    ("0001 0000000000000001 0001 00000001 01 02 0274 00 00 0000000000000001 0000000000000001 00", "partition ids"),
    ("0001 0000000000000001 0001 00000001 01 01 0000000000000001 0000000000000001 01 00 04 00000001",
     "tagged field 0"),
    ("0001 0000000000000001 0001 00000001 01 02 03 ff fe 01 00 0000000000000001 0000000000000001 00", "utf-8"),
])
def test_malformed_value_is_corrupt(data, problem):
    with pytest.raises(CorruptRecordError, match=problem):
        decode_txn_log_value(_hex(data))


def test_tombstone_is_the_callers():
    with pytest.raises(TypeError, match="tombstone"):
        decode_txn_log_value(None)


@pytest.mark.parametrize("value, version, problem", [
    (TxnLogValue(1, 1, 1, 0, {"t": [0]}, 1, 1), 0, "Empty with partitions"),
    (TxnLogValue(1, 1, 1, 8, {}, 1, 1), 1, "unknown transaction state id 8"),
    (TxnLogValue(1, 1, 1, 1, {}, 1, 1), 2, "version 2"),
    (TxnLogValue(1, 40000, 1, 1, {}, 1, 1), 1, "out of range"),
    (TxnLogValue(1, 1, 1, 1, {"t": [2**31]}, 1, 1), 0, "out of range"),
    (TxnLogValue(1, 1, 1, 1, {"t" * 32768: [0]}, 1, 1), 1, "32767"),
])
def test_encode_refuses(value, version, problem):
    with pytest.raises(ValueError, match=problem):
        encode_txn_log_value(value, version)


# --------------------------------------------------------------------------------------------------- markers

# the reference's example (base offset 100, leader epoch 5, ts 1234567, pid 1000, epoch 3, COMMIT, coordEpoch 7)
REFERENCE_MARKER = _hex("""
0000000000000064 00000042 00000005 02 c4b60edb 0030 00000000 000000000012d687 000000000012d687 00000000000003e8 0003
ffffffff 00000001 20 00 00 00 08 00000001 0c 000000000007 00""")
# MemoryRecords.withEndTransactionMarker(0, 42, 0, 77, (short) 0, ABORT with coordinator epoch 0)
JAVA_ABORT_MARKER = _hex("0000000000000000 00000042 00000000 02 b8604add 0030 00000000 000000000000002a "
                         "000000000000002a 000000000000004d 0000 ffffffff 00000001 20 00 00 00 08 00000000 0c "
                         "000000000000 00")


def test_marker_is_the_reference_example_byte_for_byte():
    b = build_marker_batch(1000, 3, True, 7, 1234567, base_offset=100, partition_leader_epoch=5)
    assert isinstance(b, bytearray)
    assert len(b) == 78
    assert bytes(b).hex() == REFERENCE_MARKER.hex()


def test_abort_marker_is_kafkas():
    assert bytes(build_marker_batch(77, 0, False, 0, 42)).hex() == JAVA_ABORT_MARKER.hex()


def test_marker_reads_as_a_valid_control_batch():
    b = build_marker_batch(1000, 3, True, 7, 1234567, base_offset=100, partition_leader_epoch=5)
    batch = RecordBatch(b, 0)
    batch.validate()
    assert (batch.is_control, batch.is_transactional, batch.base_offset, batch.last_offset, batch.record_count) == \
        (True, True, 100, 100, 1)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.partition_leader_epoch) == \
        (1000, 3, -1, 5)
    assert (batch.base_timestamp, batch.max_timestamp, batch.crc) == (1234567, 1234567, crc32c(b[21:]))
    [record] = list(batch.records())
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == \
        (100, 1234567, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07", [])


@pytest.mark.parametrize("kwargs", [dict(producer_epoch=32768), dict(coordinator_epoch=2**31),
                                    dict(producer_id=2**63), dict(timestamp_ms=-(2**63) - 1)])
def test_marker_refuses_fields_out_of_range(kwargs):
    args = dict(producer_id=1, producer_epoch=0, commit=True, coordinator_epoch=0, timestamp_ms=0) | kwargs
    with pytest.raises(ValueError, match="out of range"):
        build_marker_batch(**args)


@pytest.mark.parametrize("key, value, expected", [
    (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07", (1, 7)),
    (b"\x00\x00\x00\x00", b"\x00\x00\x7f\xff\xff\xff", (0, 2**31 - 1)),
    (b"\x00\x00\x00\x00", b"\x00\x00\xff\xff\xff\xff\xaa", (0, -1)),   # trailing bytes: ignored
    (b"\x00\x01\x00\x01", b"\x00\x03\x00\x00\x00\x02", (1, 2)),         # newer versions read as version 0
    (b"\x00\x00\x00\x02", b"\x00\x00\x01", (2, -1)),                     # LEADER_CHANGE: value not ours to read
    (b"\x00\x00\x00\x06", None, (6, -1)),
    (b"\x00\x00\x00\x63", None, (99, -1)),
])
def test_parse_marker(key, value, expected):
    assert parse_marker(key, value) == expected


@pytest.mark.parametrize("key, value, problem", [
    (None, b"\x00\x00\x00\x00\x00\x07", "key of 0 bytes"),
    (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x07", "key of 3 bytes"),
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x07", "negative version -1"),
    (b"\x00\x00\x00\x01", None, "COMMIT.*value of null"),
    (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x07", "ABORT.*value of 5 bytes"),
    (b"\x00\x00\x00\x01", b"\x80\x00\x00\x00\x00\x07", "negative version -32768"),
])
def test_parse_marker_refuses_malformed(key, value, problem):
    with pytest.raises(InvalidRecordError, match=problem):
        parse_marker(key, value)


def _control_batch(ctype: int) -> bytearray:
    """A marker batch whose record key has control type ``ctype``, CRC recomputed."""
    b = build_marker_batch(5, 1, True, 3, 1000)
    struct.pack_into(">h", b, 61 + 7, ctype)
    struct.pack_into(">I", b, 17, crc32c(b[21:]))
    return b


def test_marker_of_batch():
    data = build_batch([b"v"], producer_id=1000, producer_epoch=3, base_sequence=0, is_transactional=True)
    buf = bytearray(data) + build_marker_batch(1000, 3, True, 7, 5, base_offset=1) \
        + build_marker_batch(1000, 4, False, 8, 6, base_offset=2) + _control_batch(2)
    positions = [b.position for b in iter_batches(buf)]
    assert len(positions) == 4
    assert marker_of_batch(buf, positions[1]) == (True, 7)
    assert marker_of_batch(buf, positions[2]) == (False, 8)
    assert marker_of_batch(buf, positions[3]) is None  # LEADER_CHANGE is a control batch, not a marker
    assert marker_of_batch(build_marker_batch(1, 0, True, 0, 0)) == (True, 0)
    with pytest.raises(InvalidRecordError, match="not a control batch"):
        marker_of_batch(buf, 0)


def test_marker_of_an_empty_control_batch_is_none():
    # what the cleaner leaves of a control batch whose transaction is gone: the header alone, RecordsCount 0
    b = build_marker_batch(5, 1, True, 3, 1000)[:61]
    struct.pack_into(">i", b, 8, 61 - 12)
    struct.pack_into(">i", b, 57, 0)
    struct.pack_into(">I", b, 17, crc32c(b[21:]))
    RecordBatch(b, 0).validate()
    assert marker_of_batch(b) is None


# ---------------------------------------------------------------------------------------------------- .txnindex

def test_paths(tmp_path):
    assert txn_index_path(tmp_path, 0) == tmp_path / "00000000000000000000.txnindex"
    assert txn_index_path(tmp_path, 1234567890123) == tmp_path / "00000001234567890123.txnindex"
    assert snapshot_path(tmp_path, 42) == tmp_path / "00000000000000000042.snapshot"
    assert snapshot_path(str(tmp_path), 9223372036854775807) == tmp_path / "09223372036854775807.snapshot"


def test_txnindex_file_appears_on_first_append_with_kafkas_entries(tmp_path):
    p = txn_index_path(tmp_path, 100)
    idx = TxnIndex(p)
    assert not p.exists()
    assert idx.entries() == [] and idx.last_offset is None
    assert idx.collect(0, 1000) == ([], False)
    idx.flush()
    idx.sanity_check(100)
    idx.truncate_to(0)
    assert not p.exists()  # reading, flushing, checking, truncating an absent index make no file
    idx.append(AbortedTxn(1000, 90, 105, 106))
    idx.append(AbortedTxn(-1, -2, 2**63 - 1, -(2**63)))
    assert p.read_bytes().hex() == _hex(
        "0000 00000000000003e8 000000000000005a 0000000000000069 000000000000006a "
        "0000 ffffffffffffffff fffffffffffffffe 7fffffffffffffff 8000000000000000").hex()
    idx.flush()
    idx.close()
    assert TxnIndex(p).entries() == [AbortedTxn(1000, 90, 105, 106), AbortedTxn(-1, -2, 2**63 - 1, -(2**63))]


def test_txnindex_last_offset_must_strictly_increase(tmp_path):
    p = txn_index_path(tmp_path, 0)
    idx = TxnIndex(p)
    idx.append(AbortedTxn(1, 0, 10, 11))
    with pytest.raises(ValueError, match=r"10 is not above the current last offset 10"):
        idx.append(AbortedTxn(2, 5, 10, 11))
    with pytest.raises(ValueError, match=r"9 is not above the current last offset 10"):
        idx.append(AbortedTxn(2, 5, 9, 11))
    idx.close()
    reopened = TxnIndex(p)  # the rule holds across a reopen: the last offset is read from the file
    with pytest.raises(ValueError, match=r"3 is not above the current last offset 10"):
        reopened.append(AbortedTxn(2, 1, 3, 4))
    reopened.append(AbortedTxn(2, 1, 11, 12))
    assert [e.last_offset for e in reopened.entries()] == [10, 11]
    reopened.close()


# index entries (producer, first, last, lso) and the searches Kafka's collectAbortedTxns answers for them
COLLECT_ENTRIES = [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 3, 20, 11), AbortedTxn(3, 15, 30, 31),
                   AbortedTxn(4, 25, 40, 41)]
COLLECT_CASES = [
    # fetch_offset, upper_bound, expected producers, complete
    (0, 5, [1], True),           # 1's lso 5 >= 5 ends the search at once: 2 (first 3 < 5) is not looked at
    (0, 6, [1, 2], True),        # 1's lso 5 < 6 goes on; 2 (first 3 < 6) counts, its lso 11 >= 6 ends it
    (0, 3, [1], True),           # first_offset 3 is not < 3; lso 5 >= 3 stops at entry 1
    (11, 12, [2], True),         # 1 ended at 10 < 11; 3 starts at 15; lso 31 >= 12 at entry 3
    (21, 26, [3], True),         # 3 overlaps [21, 26) and its lso 31 >= 26 stops before 4 (first 25 < 26)
    (21, 35, [3, 4], True),      # ranges overlapping [21, 35); 4's lso 41 completes
    (21, 50, [3, 4], False),     # nothing has lso >= 50: a later segment may hold more
    (41, 100, [], False),
    (10, 11, [1, 2], True),      # last_offset == fetch_offset counts; 2's lso 11 == upper bound completes
    (0, 0, [], True),            # nothing starts below 0, and lso 5 >= 0 completes at once
]


@pytest.mark.parametrize("fetch_offset, upper_bound, producers, complete", COLLECT_CASES)
def test_txnindex_collect(tmp_path, fetch_offset, upper_bound, producers, complete):
    idx = TxnIndex(txn_index_path(tmp_path, 0))
    for e in COLLECT_ENTRIES:
        idx.append(e)
    found, done = idx.collect(fetch_offset, upper_bound)
    assert [e.producer_id for e in found] == producers
    assert done is complete
    assert all(isinstance(e, AbortedTxn) for e in found)
    idx.close()


def test_txnindex_truncate_to(tmp_path):
    p = txn_index_path(tmp_path, 0)
    idx = TxnIndex(p)
    for e in COLLECT_ENTRIES:
        idx.append(e)
    idx.truncate_to(31)  # keeps last offsets 10, 20, 30
    assert [e.last_offset for e in idx.entries()] == [10, 20, 30]
    assert p.stat().st_size == 3 * 34
    idx.truncate_to(20)  # last offset 20 >= 20 goes
    assert [e.last_offset for e in idx.entries()] == [10]
    assert idx.last_offset == 10
    idx.append(AbortedTxn(9, 11, 12, 13))  # appends continue after the cut, above the new last offset
    assert [e.last_offset for e in idx.entries()] == [10, 12]
    idx.truncate_to(1000)
    assert [e.last_offset for e in idx.entries()] == [10, 12]
    idx.truncate_to(0)
    assert idx.entries() == [] and p.stat().st_size == 0 and idx.last_offset is None
    idx.append(AbortedTxn(1, 0, 1, 2))
    assert idx.entries() == [AbortedTxn(1, 0, 1, 2)]
    idx.reset()
    assert idx.entries() == []
    idx.close()


def test_txnindex_torn_tail_is_ignored_then_cut(tmp_path):
    p = txn_index_path(tmp_path, 0)
    good = AbortedTxn(1, 0, 10, 11).encode() + AbortedTxn(2, 5, 20, 21).encode()
    p.write_bytes(good + AbortedTxn(3, 6, 30, 31).encode()[:20])  # a crash in the middle of the third entry
    idx = TxnIndex(p)
    assert idx.entries() == [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21)]
    assert idx.collect(0, 1000) == ([AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21)], False)
    idx.sanity_check(0)
    idx.append(AbortedTxn(3, 6, 30, 31))
    assert p.read_bytes() == good + AbortedTxn(3, 6, 30, 31).encode()
    idx.close()
    p.write_bytes(good + b"\x00" * 7)
    idx = TxnIndex(p)
    idx.truncate_to(1000)  # nothing to drop but the torn tail
    assert p.read_bytes() == good
    idx.close()


def test_txnindex_sanity_check(tmp_path):
    p = txn_index_path(tmp_path, 100)
    idx = TxnIndex(p)
    idx.append(AbortedTxn(7, 50, 100, 101))  # first offset below the base: fine, a transaction spans segments
    idx.append(AbortedTxn(8, 60, 120, 121))
    idx.sanity_check(100)
    with pytest.raises(CorruptIndexError, match=r"is less than the segment's base offset 101"):
        idx.sanity_check(101)
    idx.close()
    p.write_bytes(b"\x00\x01" + AbortedTxn(7, 50, 100, 101).encode()[2:])
    with pytest.raises(CorruptIndexError, match="version 1"):
        TxnIndex(p).sanity_check(0)
    with pytest.raises(CorruptIndexError, match="version 1"):
        TxnIndex(p).entries()


def test_txnindex_rename_and_delete(tmp_path):
    p = txn_index_path(tmp_path, 0)
    idx = TxnIndex(p)
    idx.append(AbortedTxn(1, 0, 10, 11))
    moved = p.with_name(p.name + ".deleted")
    idx.rename_to(moved)
    assert not p.exists() and idx.path == moved
    idx.append(AbortedTxn(1, 11, 12, 13))  # still writing the same open file, now under its new name
    assert [e.last_offset for e in TxnIndex(moved).entries()] == [10, 12]
    assert idx.delete_if_exists() is True
    assert not moved.exists() and idx.entries() == []
    assert idx.delete_if_exists() is False


def test_txnindex_errors_are_storage_errors(tmp_path):
    idx = TxnIndex(tmp_path / "no-such-dir" / "00000000000000000000.txnindex")
    with pytest.raises(OSError, match="open transaction index failed on .*no-such-dir") as e:
        idx.append(AbortedTxn(1, 0, 1, 2))
    assert isinstance(e.value, KafkaError) and e.value.name == "KAFKA_STORAGE_ERROR"


# ---------------------------------------------------------------------------------------------------- .snapshot

SNAPSHOT_ENTRY = ProducerSnapshotEntry(producer_id=3000, epoch=1, last_sequence=4, last_offset=9, offset_delta=2,
                                       timestamp=1234800, coordinator_epoch=0, current_txn_first_offset=8)


@pytest.mark.parametrize("entries, data", [
    # ProducerStateManager.writeSnapshot of one entry (epoch 1, batch seq 2..4 at offsets 7..9, open txn at 8)
    ([SNAPSHOT_ENTRY], "0001 b824c9c1 00000001 0000000000000bb8 0001 00000004 0000000000000009 00000002 "
                       "000000000012d770 00000000 0000000000000008"),
    ([], "0001 48674bc7 00000000"),
])
def test_snapshot_golden_bytes(entries, data):
    assert encode_producer_snapshot(entries).hex() == _hex(data).hex()
    assert decode_producer_snapshot(_hex(data)) == entries


def test_snapshot_round_trip():
    entries = [SNAPSHOT_ENTRY,
               ProducerSnapshotEntry(-1, -1, -1, -1, 0, -1, -1, -1),
               ProducerSnapshotEntry(2**63 - 1, 32767, 2**31 - 1, 2**63 - 1, 2**31 - 1, 2**63 - 1, 2**31 - 1,
                                     2**63 - 1)] + [ProducerSnapshotEntry(i, i % 7, i, 10 * i, 0, 1000 + i, 3, -1)
                                                    for i in range(500)]
    data = encode_producer_snapshot(iter(entries))
    assert len(data) == 10 + 46 * len(entries)
    assert decode_producer_snapshot(data) == entries
    assert decode_producer_snapshot(memoryview(data)) == entries


def test_snapshot_detects_every_flipped_bit_and_bad_lengths():
    data = encode_producer_snapshot([SNAPSHOT_ENTRY, ProducerSnapshotEntry(1, 2, 3, 4, 5, 6, 7, -1)])
    for i in range(len(data)):
        for bit in (0x01, 0x80):
            bad = bytearray(data)
            bad[i] ^= bit
            with pytest.raises(CorruptSnapshotError, match="version|CRC mismatch"):
                decode_producer_snapshot(bytes(bad))
    for n in range(len(data)):
        with pytest.raises(CorruptSnapshotError):
            decode_producer_snapshot(data[:n])


@pytest.mark.parametrize("data, problem", [
    (b"", "shorter than its header"),
    (_hex("0001 48674bc7 0000"), "shorter than its header"),
    (_hex("0000 48674bc7 00000000"), "unknown version 0"),
    (_hex("0002 48674bc7 00000000"), "unknown version 2"),
    (_hex("0001 48674bc8 00000000"), "stored 0x48674bc8, computed 0x48674bc7"),
])
def test_snapshot_refuses(data, problem):
    with pytest.raises(CorruptSnapshotError, match=problem):
        decode_producer_snapshot(data)


def test_snapshot_count_must_match_length():
    # a CRC that holds over a count that lies (one entry claimed, none there; one there, two claimed)
    for count, body in ((1, b""), (2, encode_producer_snapshot([SNAPSHOT_ENTRY])[10:]), (-1, b"")):
        rest = struct.pack(">i", count) + body
        data = struct.pack(">hI", 1, crc32c(rest)) + rest
        with pytest.raises(CorruptSnapshotError, match=f"holds {count} entries"):
            decode_producer_snapshot(data)
    assert issubclass(CorruptSnapshotError, KafkaError) and issubclass(CorruptSnapshotError, ValueError)


# --------------------------------------------------------------------------------- Apache Kafka's kafka-dump-log

def _load(name: str, path: Path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _lab():
    """The compat lab (tests/compat/lab.py) when its Kafka is installed; this test never fetches it."""
    lab = _load("kafkalog_test_lab", REPO / "tests" / "compat" / "lab.py")
    try:
        lab.java_exe()
    except lab.LabError as e:
        pytest.skip(f"the lab's Kafka needs Java: {e}")
    if not (lab.KAFKA_HOME / ".complete").is_file():
        pytest.skip(f"the lab's Kafka {lab.KAFKA_VERSION} is not installed in {lab.KAFKA_HOME} (tests/compat fetch it)")
    return lab


def test_kafka_dump_log_reads_our_markers_txnindex_and_snapshot(tmp_path):
    lab = _lab()
    d = tmp_path / "t-0"
    d.mkdir()
    log = bytearray(build_batch([b"v0", b"v1"], keys=[b"k0", None], base_offset=0, producer_id=1000,
                                producer_epoch=3, base_sequence=0, is_transactional=True, partition_leader_epoch=5,
                                default_timestamp=1234000))
    log += build_marker_batch(1000, 3, True, 7, 1234567, base_offset=2, partition_leader_epoch=5)
    log += build_batch([b"v3"], base_offset=3, producer_id=2000, producer_epoch=0, base_sequence=0,
                       is_transactional=True, partition_leader_epoch=5, default_timestamp=1234600)
    log += build_marker_batch(2000, 0, False, 9, 1234700, base_offset=4, partition_leader_epoch=5)
    seg = d / "00000000000000000000.log"
    seg.write_bytes(log)
    idx = TxnIndex(txn_index_path(d, 0))
    idx.append(AbortedTxn(2000, 3, 4, 5))
    idx.append(AbortedTxn(2001, 1, 9, 10))
    idx.close()
    snap = snapshot_path(d, 5)
    snap.write_bytes(encode_producer_snapshot([
        ProducerSnapshotEntry(1000, 3, 1, 2, 0, 1234567, 7, -1),
        ProducerSnapshotEntry(3000, 1, 4, 9, 2, 1234800, 0, 8),
    ]))
    bad = d / "00000000000000000006.snapshot"
    data = bytearray(snap.read_bytes())
    data[20] ^= 1
    bad.write_bytes(bytes(data))
    # a __transaction_state segment: Kafka's own decoder shows our keys and values
    ts = tmp_path / "__transaction_state-0"
    ts.mkdir()
    big = TxnLogValue(5000, 32766, 900000, 2, {"ab": [0, 3]}, 1700000000000, 1699999999000, prev_producer_id=4000,
                      next_producer_id=6000, client_tv=2, next_producer_epoch=0)
    (ts / "00000000000000000000.log").write_bytes(build_batch(
        [encode_txn_log_value(V1_EXAMPLE, 1), encode_txn_log_value(EMPTY, 0), encode_txn_log_value(big, 1), None],
        keys=[encode_txn_log_key(k) for k in ("tx", "idle", "big", "gone")], default_timestamp=5))

    files = [seg, txn_index_path(d, 0), snap, bad]
    r = lab.kafka_tool("kafka-dump-log", ["--deep-iteration", "--files", ",".join(map(str, files))], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    records = [line for line in out if line.startswith("| offset:")]
    assert len(records) == 5, r.stdout
    assert records[2].endswith("keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT "
                               "coordinatorEpoch: 7"), records[2]
    assert records[4].endswith("endTxnMarker: ABORT coordinatorEpoch: 9"), records[4]
    batches = [line for line in out if line.startswith("baseOffset:")]
    assert "producerId: 1000 producerEpoch: 3 partitionLeaderEpoch: 5 isTransactional: true isControl: true" \
        in batches[1], batches[1]
    assert all("isvalid: true" in b for b in batches) and len(batches) == 4
    assert "baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1" in batches[1]
    assert "CreateTime: 1234567 size: 78 magic: 2 compresscodec: none crc: 3300265691" in batches[1]
    assert [line for line in out if line.startswith("version: ")] == [
        "version: 0 producerId: 2000 firstOffset: 3 lastOffset: 4 lastStableOffset: 5",
        "version: 0 producerId: 2001 firstOffset: 1 lastOffset: 9 lastStableOffset: 10",
    ]
    assert [line for line in out if line.startswith("producerId: ")] == [
        "producerId: 1000 producerEpoch: 3 coordinatorEpoch: 7 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1234567 firstSequence: 1 lastSequence: 1 lastOffset: 2 offsetDelta: 0 timestamp: 1234567",
        "producerId: 3000 producerEpoch: 1 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong[8] "
        "lastTimestamp: 1234800 firstSequence: 2 lastSequence: 4 lastOffset: 9 offsetDelta: 2 timestamp: 1234800",
    ]
    # the same flipped byte Kafka's reader refuses, ours refuses
    assert "Snapshot is corrupt (CRC is no longer valid)" in r.stdout + r.stderr
    with pytest.raises(CorruptSnapshotError, match="CRC mismatch"):
        decode_producer_snapshot(bad.read_bytes())

    r = lab.kafka_tool("kafka-dump-log", ["--transaction-log-decoder", "--files",
                                          str(ts / "00000000000000000000.log")], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = [line.split(" key: ", 1)[1] for line in r.stdout.splitlines() if line.startswith("| offset:")]
    assert shown == [
        '{"type":"0","data":{"transactionalId":"tx"}} payload: {"version":"1","data":{"producerId":1000,'
        '"producerEpoch":2,"transactionTimeoutMs":60000,"transactionStatus":"Ongoing","transactionPartitions":'
        '[{"topic":"t","partitionIds":[0]}],"transactionLastUpdateTimestampMs":5,"transactionStartTimestampMs":4,'
        '"clientTransactionVersion":2}}',
        '{"type":"0","data":{"transactionalId":"idle"}} payload: {"version":"0","data":{"producerId":7,'
        '"producerEpoch":0,"transactionTimeoutMs":60000,"transactionStatus":"Empty","transactionPartitions":null,'
        '"transactionLastUpdateTimestampMs":99,"transactionStartTimestampMs":-1}}',
        '{"type":"0","data":{"transactionalId":"big"}} payload: {"version":"1","data":{"producerId":5000,'
        '"previousProducerId":4000,"nextProducerId":6000,"producerEpoch":32766,"nextProducerEpoch":0,'
        '"transactionTimeoutMs":900000,"transactionStatus":"PrepareCommit","transactionPartitions":[{"topic":"ab",'
        '"partitionIds":[0,3]}],"transactionLastUpdateTimestampMs":1700000000000,'
        '"transactionStartTimestampMs":1699999999000,"clientTransactionVersion":2}}',
        '{"type":"0","data":{"transactionalId":"gone"}} payload: <DELETE>',
    ]
