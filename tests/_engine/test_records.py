"""kafkalog._engine.batch and columns: golden bytes, real peers as oracles (aiokafka, kafka-python), corruption,
in-place rewrites, column decode and round-trip properties.

Batches made here by hand (``_batch``) use only ``struct`` and the bitwise CRC-32C below, never the module under test.
"""

import io
import mmap
import struct
import time
import types
import zlib

import cramjam
import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog._engine import batch as R
from kafkalog._engine.columns import decode_columns
from kafkalog.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    UnsupportedCompressionTypeError,
)

CODECS = [0, 1, 2, 3, 4]
CODEC_IDS = ["none", "gzip", "snappy", "lz4", "zstd"]


# ---------------------------------------------------------------------------------------------------------------
# Independent helpers: reference CRC-32C, varints, hand-made batches


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def ref_crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in bytes(data):
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def varint(n):
    z = ((n << 1) ^ (n >> 63)) & (2**64 - 1)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _field(b):
    return varint(-1) if b is None else varint(len(b)) + b


def record_bytes(offset_delta, ts_delta, key, value, headers=(), *, body_extra=b"", length_adjust=0,
                 header_count=None):
    body = (b"\x00" + varint(ts_delta) + varint(offset_delta) + _field(key) + _field(value)
            + varint(len(headers) if header_count is None else header_count))
    for k, v in headers:
        body += _field(k.encode()) + _field(v)
    body += body_extra
    return varint(len(body) + length_adjust) + body


HEADER = struct.Struct(">qiibIhiqqqhii")


def _batch(records, count, *, codec=0, attributes=0, base_offset=0, base_ts=0, max_ts=0, last_offset_delta=None,
           epoch=-1, producer_id=-1, producer_epoch=-1, base_sequence=-1):
    """A v2 batch around an already encoded (and, for a codec, already compressed) records section."""
    attrs = codec | attributes
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    tail = struct.pack(">hiqqqhii", attrs, lod, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                       count) + records
    head = struct.pack(">qiib", base_offset, len(tail) + 9, epoch, 2)
    return head + struct.pack(">I", ref_crc32c(tail)) + tail


def _restamp(buf):
    """Recompute the CRC of a batch after a test edited it (so only the edit is wrong)."""
    buf[17:21] = struct.pack(">I", ref_crc32c(buf[21:]))
    return buf


def _records_of(batch):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in R.RecordBatch(batch)]


def _columns_records(cols):
    """Rebuild (offset, timestamp, key, value, headers) tuples from decode_columns' Arrow-style buffers."""
    out = []
    keys, values = cols["keys"].tobytes(), cols["values"].tobytes()
    hkeys, hvalues = cols["header_keys"].tobytes(), cols["header_values"].tobytes()
    ko, vo, ho = cols["key_offsets"], cols["value_offsets"], cols["header_offsets"]
    hko, hvo = cols["header_key_offsets"], cols["header_value_offsets"]
    for i in range(len(cols["offset"])):
        key = keys[ko[i]:ko[i + 1]] if cols["key_valid"][i] else None
        value = values[vo[i]:vo[i + 1]] if cols["value_valid"][i] else None
        headers = [(hkeys[hko[j]:hko[j + 1]].decode(),
                    hvalues[hvo[j]:hvo[j + 1]] if cols["header_value_valid"][j] else None)
                   for j in range(ho[i], ho[i + 1])]
        out.append((int(cols["offset"][i]), int(cols["timestamp"][i]), key, value, headers))
    return out


# One table of records exercising the corners: null/empty keys and values, headers with null values and non-ASCII
# keys, a timestamp below the first (negative delta), and a value past 64 KB (several LZ4 / xerial blocks).
SAMPLE = [
    (b"key-0", b"value-0" * 20, 1_700_000_000_000, [("trace", b"abc"), ("n\u00e9", None)]),
    (None, b"value-1" * 20, 1_700_000_000_005, []),
    (b"", None, 1_699_999_999_990, [("empty", b"")]),
    (b"key-3", b"", 1_700_000_000_007, []),
    (b"key-4", bytes(range(256)) * 400, 1_700_000_000_001, [("big", b"x" * 300)]),
]


def _sample_batch(codec, **kw):
    return R.build_batch([r[1] for r in SAMPLE], keys=[r[0] for r in SAMPLE], timestamps=[r[2] for r in SAMPLE],
                         headers=[r[3] for r in SAMPLE], compression=codec, **kw)


def _sample_expected(base_offset=0):
    return [(base_offset + i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(SAMPLE)]


# ---------------------------------------------------------------------------------------------------------------
# Golden bytes and CRC


# Two records, the first with a header, the second with a null key and a timestamp 1 ms BELOW the first.
GOLDEN = bytes.fromhex(
    "0000000000000007"  # BaseOffset 7
    "00000048"  # BatchLength 72 (84 - 12)
    "00000003"  # PartitionLeaderEpoch 3
    "02"  # Magic 2
    "4f6fc481"  # CRC-32C of [21, 84)
    "0000"  # Attributes: no codec, CreateTime
    "00000001"  # LastOffsetDelta 1
    "00000000000003e8"  # BaseTimestamp 1000 (the first record's)
    "00000000000003e8"  # MaxTimestamp 1000
    "ffffffffffffffff"  # ProducerId -1
    "ffff"  # ProducerEpoch -1
    "ffffffff"  # BaseSequence -1
    "00000002"  # RecordsCount 2
    # record 0: Length 13 | Attributes 0 | TimestampDelta 0 | OffsetDelta 0 | Key "k" | Value "v0" |
    #           HeaderCount 1 | "h" = "x"
    "1a" "00" "00" "00" "02" "6b" "04" "7630" "02" "02" "68" "02" "78"
    # record 1: Length 8 | Attributes 0 | TimestampDelta -1 | OffsetDelta 1 | Key null | Value "v1" | HeaderCount 0
    "10" "00" "01" "02" "01" "04" "7631" "00"
)


def test_golden_batch_byte_for_byte():
    assert ref_crc32c(GOLDEN[21:]) == struct.unpack(">I", GOLDEN[17:21])[0]
    built = R.build_batch([b"v0", b"v1"], keys=[b"k", None], timestamps=[1000, 999], headers=[[("h", b"x")], None],
                          base_offset=7, partition_leader_epoch=3)
    assert built.hex() == GOLDEN.hex()
    builder = R.BatchBuilder()
    builder.append(b"v0", b"k", 1000, [("h", b"x")])
    builder.append(b"v1", None, 999)
    assert builder.build(base_offset=7, partition_leader_epoch=3) == GOLDEN
    assert _records_of(GOLDEN) == [(7, 1000, b"k", b"v0", [("h", b"x")]), (8, 999, None, b"v1", [])]


@pytest.mark.parametrize("data, expected", [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),  # the standard CRC-32C check value
    (bytes(32), 0x8A9136AA),  # RFC 3720 B.4: 32 bytes of zeros
    (b"\xff" * 32, 0x62A8AB43),  # RFC 3720 B.4: 32 bytes of ones
])
def test_crc32c_known_vectors(data, expected):
    assert R.crc32c(data) == expected == ref_crc32c(data)


# around the 8-byte words and the 3 x 256 / 3 x 4096 byte lanes of the hardware path, at every alignment
@pytest.mark.parametrize("size", [1, 7, 8, 9, 63, 767, 768, 1000, 12_287, 12_288, 12_300, 70_000])
def test_crc32c_matches_reference_and_continues(size):
    raw = bytes((i * 131 + 7) & 0xFF for i in range(size + 7))
    for start in range(8):
        assert R.crc32c(memoryview(raw)[start:start + size]) == ref_crc32c(raw[start:start + size]), start
    data = raw[:size]
    assert R.crc32c(data[size // 3:], R.crc32c(data[:size // 3])) == R.crc32c(data)
    assert R.crc32c(memoryview(bytearray(data))) == R.crc32c(np.frombuffer(data, np.uint8)) == R.crc32c(data)


# ---------------------------------------------------------------------------------------------------------------
# Peers as oracles


def _aiokafka_readers():
    from aiokafka.record import default_records as d
    return [("aiokafka-cython", d._DefaultRecordBatchCython), ("aiokafka-py", d._DefaultRecordBatchPy)]


def _kafka_python_reader():
    from kafka.record.default_records import DefaultRecordBatch
    return ("kafka-python", DefaultRecordBatch)


READERS = [*_aiokafka_readers(), _kafka_python_reader()]


def _aiokafka_builders():
    from aiokafka.record import default_records as d
    return [("aiokafka-cython", d._DefaultRecordBatchBuilderCython), ("aiokafka-py", d._DefaultRecordBatchBuilderPy)]


def _kafka_python_builder():
    from kafka.record.default_records import DefaultRecordBatchBuilder
    return ("kafka-python", DefaultRecordBatchBuilder)


BUILDERS = [*_aiokafka_builders(), _kafka_python_builder()]


@pytest.fixture(autouse=True)
def _kafka_python_snappy(monkeypatch):
    """kafka-python needs python-snappy, which is not installed: give it the same raw snappy codec through cramjam."""
    import kafka.codec
    if kafka.codec.snappy is None:
        shim = types.SimpleNamespace(compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
                                     decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))))
        monkeypatch.setattr(kafka.codec, "snappy", shim)


@pytest.mark.parametrize("reader", READERS, ids=[r[0] for r in READERS])
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_our_batches_parse_with_peers(codec, reader):
    batch = _sample_batch(codec, base_offset=1000, producer_id=77, producer_epoch=3, base_sequence=12)
    theirs = reader[1](batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (theirs.base_offset, theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (1000, 77, 3, 12)
    assert theirs.max_timestamp == max(r[2] for r in SAMPLE)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert got == _sample_expected(1000)


def _peer_build(builder_cls, codec, sample, producer=(-1, -1, -1)):
    b = builder_cls(magic=2, compression_type=codec, is_transactional=0, producer_id=producer[0],
                    producer_epoch=producer[1], base_sequence=producer[2], batch_size=1 << 24)
    for i, (k, v, ts, h) in enumerate(sample):
        assert b.append(i, timestamp=ts, key=k, value=v, headers=h) is not None
    return bytes(b.build())


@pytest.mark.parametrize("builder", BUILDERS, ids=[b[0] for b in BUILDERS])
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_peer_batches_parse_with_ours(codec, builder):
    theirs = _peer_build(builder[1], codec, SAMPLE, producer=(5, 1, 40))
    batch = R.RecordBatch(theirs)
    assert batch.compression == codec  # the sample compresses, so the peers did not fall back to none
    assert batch.is_valid()
    batch.validate(decompress=True)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 40)
    assert batch.record_count == len(batch) == len(SAMPLE)
    assert _records_of(theirs) == _sample_expected()
    assert _columns_records(decode_columns(theirs)) == _sample_expected()
    if codec == 0:  # no codec: nothing left to choose, the bytes must be the same
        # (kafka-python stamps PartitionLeaderEpoch 0 where Java and aiokafka write -1)
        ours = _sample_batch(0, producer_id=5, producer_epoch=1, base_sequence=40,
                             partition_leader_epoch=batch.partition_leader_epoch)
        assert ours == theirs


@pytest.mark.parametrize("reader", READERS, ids=[r[0] for r in READERS])
def test_log_append_time_read_by_peers(reader):
    buf = bytearray(_sample_batch(3))
    R.set_log_append_time(buf, 0, 1_800_000_000_000)
    theirs = reader[1](bytes(buf))
    assert theirs.validate_crc()
    assert theirs.timestamp_type == 1
    assert {r.timestamp for r in theirs} == {1_800_000_000_000}


# ---------------------------------------------------------------------------------------------------------------
# Builders


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_batch_builder_matches_build_batch(codec):
    builder = R.BatchBuilder(compression=codec, producer_id=9, producer_epoch=2, base_sequence=100)
    assert (builder.count, builder.first_timestamp, builder.max_timestamp) == (0, -1, -1)
    for i, (k, v, ts, h) in enumerate(SAMPLE):
        assert builder.append(v, k, ts, h) == i
    expected = _sample_batch(codec, base_offset=50, partition_leader_epoch=4, producer_id=9, producer_epoch=2,
                             base_sequence=100)
    assert builder.build(base_offset=50, partition_leader_epoch=4) == expected
    assert builder.count == len(SAMPLE)
    assert builder.first_timestamp == SAMPLE[0][2]
    assert builder.max_timestamp == max(r[2] for r in SAMPLE)
    assert builder.size_in_bytes == len(_sample_batch(0))
    builder.reset()
    assert (builder.count, builder.size_in_bytes, builder.first_timestamp) == (0, 61, -1)
    with pytest.raises(ValueError):
        builder.build()
    builder.append(b"again", None, 5)
    assert builder.build() == R.build_batch([b"again"], timestamps=[5], compression=codec, producer_id=9,
                                            producer_epoch=2, base_sequence=100)


def test_builder_rejects_bad_input_without_changing_state():
    builder = R.BatchBuilder()
    builder.append(b"a", timestamp=10)
    with pytest.raises(TypeError, match="value"):
        builder.append("text")
    with pytest.raises(TypeError, match="key"):
        builder.append(b"v", 12)
    with pytest.raises(TypeError, match="header"):
        builder.append(b"v", None, 11, [("k",)])
    with pytest.raises(InvalidTimestampError):
        builder.append(b"v", None, -5)
    assert builder.count == 1
    assert builder.build() == R.build_batch([b"a"], timestamps=[10])


@pytest.mark.parametrize("kwargs, error", [
    ({"compression": 5}, UnsupportedCompressionTypeError),
    ({"compression": "brotli"}, UnsupportedCompressionTypeError),
    ({"compression": "gzip", "compression_level": 10}, InvalidConfigError),
    ({"compression": "zstd", "compression_level": 23}, InvalidConfigError),
    ({"compression": "lz4", "compression_level": 0}, InvalidConfigError),
    ({"timestamp_type": 2}, ValueError),
])
def test_builder_options_validated(kwargs, error):
    with pytest.raises(error):
        R.build_batch([b"x"], **kwargs)
    with pytest.raises(error):
        R.BatchBuilder(**kwargs)


@pytest.mark.parametrize("args, kwargs, error", [
    (([],), {}, ValueError),
    (([b"a", b"b"],), {"keys": [b"k"]}, ValueError),
    (([b"a"],), {"timestamps": [1, 2]}, ValueError),
    (([b"a"],), {"headers": [[], []]}, ValueError),
    ((["text"],), {}, TypeError),
    (([b"a"],), {"keys": [1]}, TypeError),
    (([b"a"],), {"headers": [[(None, b"v")]]}, TypeError),
    (([b"a"],), {"headers": [[("k", "not bytes")]]}, TypeError),
    (([b"a"],), {"timestamps": [-2]}, InvalidTimestampError),
])
def test_build_batch_input_errors(args, kwargs, error):
    with pytest.raises(error):
        R.build_batch(*args, **kwargs)


@pytest.mark.parametrize("name, code", [(None, 0), ("none", 0), ("gzip", 1), ("SNAPPY", 2), ("lz4", 3), ("zstd", 4)])
def test_compression_names(name, code):
    assert R.RecordBatch(R.build_batch([b"v" * 100], compression=name)).compression == code


@pytest.mark.parametrize("codec, level", [(1, 1), (1, 9), (3, 12), (4, -5), (4, 19)])
def test_compression_levels_round_trip(codec, level):
    batch = R.build_batch([b"level" * 200], compression=codec, compression_level=level, timestamps=[3])
    assert _records_of(batch) == [(0, 3, None, b"level" * 200, [])]


def test_lz4_is_kafkas_frame():
    batch = R.RecordBatch(R.build_batch([b"q" * 200_000], compression="lz4"))
    frame = batch.tobytes()[61:]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20, "block independence flag (Kafka rejects linked blocks)"
    assert not frame[4] & 0x04, "no content checksum"
    assert frame[5] == 0x40, "64 KB maximum block size"


def test_snappy_is_xerial_framed_in_32k_blocks():
    batch = R.RecordBatch(R.build_batch([bytes(range(256)) * 300], compression="snappy"))
    stream = batch.tobytes()[61:]
    assert stream[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, plain = 16, b""
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        block = bytes(cramjam.snappy.decompress_raw(stream[pos + 4:pos + 4 + n]))
        assert len(block) <= 32768
        plain += block
        pos += 4 + n
    assert len(plain) > 76_800 and pos == len(stream)


def test_gzip_is_a_gzip_stream():
    batch = R.RecordBatch(R.build_batch([b"g" * 500], compression="gzip"))
    assert batch.tobytes()[61:63] == b"\x1f\x8b"


def test_default_timestamp_is_now_and_header_fields():
    before = int(time.time() * 1000)
    batch = R.RecordBatch(R.build_batch([b"a", b"b"], timestamp_type=1, is_transactional=True, producer_id=3,
                                        producer_epoch=4, base_sequence=5, partition_leader_epoch=6, base_offset=90))
    after = int(time.time() * 1000)
    assert before <= batch.base_timestamp == batch.max_timestamp <= after
    assert (batch.timestamp_type, batch.is_transactional, batch.is_control, batch.magic) == (1, True, False, 2)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (3, 4, 5)
    assert (batch.partition_leader_epoch, batch.base_offset, batch.last_offset, batch.next_offset) == (6, 90, 91, 92)
    assert batch.size_in_bytes == batch.batch_length + 12 == len(batch.tobytes())
    assert batch.attributes == 0x08 | 0x10 and batch.last_offset_delta == 1
    explicit = R.build_batch([b"a", b"b"], timestamps=[None, -1], default_timestamp=42)
    assert [r[1] for r in _records_of(explicit)] == [42, 42]


# ---------------------------------------------------------------------------------------------------------------
# Corruption and framing


def test_crc_mismatch_detected():
    buf = bytearray(GOLDEN)
    buf[17] ^= 0x01
    batch = R.RecordBatch(buf)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match=r"offset 7 .*CRC"):
        batch.validate()
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_columns(buf)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_any_flipped_byte_in_crc_range_detected(codec):
    good = R.build_batch([b"alpha" * 10, None, b"gamma"], keys=[b"k", None, b""], timestamps=[5, 1, 9],
                         headers=[[("h", b"v")], None, None], compression=codec)
    assert R.RecordBatch(good).is_valid()
    for pos in range(21, len(good)):
        buf = bytearray(good)
        buf[pos] ^= 0xFF
        assert not R.RecordBatch(buf).is_valid(), pos


def test_fields_outside_the_crc():
    for pos in list(range(0, 8)) + list(range(12, 16)):  # BaseOffset, PartitionLeaderEpoch
        buf = bytearray(GOLDEN)
        buf[pos] ^= 0x5A
        assert R.RecordBatch(buf).is_valid(), pos


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("declared", [2, 4], ids=["too-few", "too-many"])
def test_declared_count_mismatch(codec, declared):
    # three real records, CRC made valid again: only the count is wrong
    buf = bytearray(R.build_batch([b"a" * 40, b"b" * 40, b"c" * 40], timestamps=[1, 2, 3], compression=codec))
    buf[57:61] = struct.pack(">i", declared)
    buf[23:27] = struct.pack(">i", max(declared, 3) - 1)
    _restamp(buf)
    batch = R.RecordBatch(buf)
    with pytest.raises(InvalidRecordError, match="Incorrect declared batch size"):
        list(batch)
    with pytest.raises(InvalidRecordError, match="Incorrect declared batch size"):
        decode_columns(buf)
    with pytest.raises(InvalidRecordError, match="offset 0"):
        batch.validate(decompress=True)
    # without decompressing, only an uncompressed batch's framing can be checked
    assert batch.is_valid() == (codec != 0)


def _framing_cases():
    ok = record_bytes(0, 0, b"k", b"v")
    return [
        ("length past the end", record_bytes(0, 0, b"k", b"v", length_adjust=5), "record size"),
        ("length short of the fields", record_bytes(0, 0, b"k", b"v", length_adjust=-1), "do not add up"),
        ("bytes after the fields", record_bytes(0, 0, b"k", b"v", body_extra=b"\x00"), "do not add up"),
        ("negative header count", record_bytes(0, 0, b"k", b"v", header_count=-1), "headers"),
        ("header count above the bytes left", record_bytes(0, 0, b"k", b"v", header_count=50), "headers"),
        ("negative header key length",
         record_bytes(0, 0, b"k", b"v", header_count=1, body_extra=varint(-1) + varint(-1)), "header"),
        ("key past the record", varint(5) + b"\x00\x00\x00" + varint(40) + b"x", "do not add up"),
        ("truncated varint", varint(3) + b"\x00\x00\x80", "do not add up"),
        ("trailing bytes after the last record", ok + b"\x00\x00", "records still remaining"),
    ]


@pytest.mark.parametrize("records, message", [c[1:] for c in _framing_cases()], ids=[c[0] for c in _framing_cases()])
@pytest.mark.parametrize("codec", [0, 4], ids=["none", "zstd"])
def test_malformed_records_rejected(codec, records, message):
    section = records if codec == 0 else zstandard.ZstdCompressor().compress(records)
    buf = _batch(section, 1, codec=codec, base_offset=33)
    batch = R.RecordBatch(buf)
    assert batch.is_valid() == (codec != 0)
    with pytest.raises(InvalidRecordError, match=message):
        list(batch)
    with pytest.raises(InvalidRecordError, match=message):
        decode_columns(buf)
    with pytest.raises(InvalidRecordError, match="offset 33"):
        batch.validate(decompress=True)


def test_empty_batch_and_negative_count():
    empty = _batch(b"", 0, last_offset_delta=4)  # what compaction leaves of a batch: count 0, offsets kept
    batch = R.RecordBatch(empty)
    assert batch.is_valid() and list(batch) == [] and batch.next_offset == 5
    assert len(decode_columns(empty)["offset"]) == 0
    bad = R.RecordBatch(_batch(record_bytes(0, 0, None, b"v"), -1, last_offset_delta=0))
    assert not bad.is_valid()
    with pytest.raises(InvalidRecordError, match="-1 records"):
        bad.validate()
    too_many = R.RecordBatch(_batch(record_bytes(0, 0, None, b"v") * 3, 3, last_offset_delta=1))
    with pytest.raises(InvalidRecordError, match="last offset delta"):
        too_many.validate()


@pytest.mark.parametrize("edit, error, message", [
    (lambda b: b.__setitem__(slice(8, 12), struct.pack(">i", 30)), CorruptRecordError, "illegal batch length"),
    (lambda b: b.__setitem__(slice(8, 12), struct.pack(">i", 5)), CorruptRecordError, "illegal batch length"),
    (lambda b: b.__setitem__(16, 1), CorruptRecordError, "magic 1"),
    (lambda b: b.__setitem__(slice(8, 12), struct.pack(">i", 500)), CorruptRecordError, "truncated"),
])
def test_bad_header_fields(edit, error, message):
    buf = bytearray(GOLDEN)
    edit(buf)
    with pytest.raises(error, match=message):
        R.RecordBatch(buf)


def test_unknown_codec():
    buf = bytearray(GOLDEN)
    buf[22] |= 0x05
    _restamp(buf)
    batch = R.RecordBatch(buf)
    assert batch.compression == 5 and not batch.is_valid()
    with pytest.raises(UnsupportedCompressionTypeError):
        batch.validate()
    with pytest.raises(UnsupportedCompressionTypeError):
        list(batch)
    with pytest.raises(UnsupportedCompressionTypeError):
        decode_columns(buf)


# ---------------------------------------------------------------------------------------------------------------
# Codec framings written by others


def _plain_records(n=5, size=30):
    return b"".join(record_bytes(i, i * 10, b"k%d" % i, bytes([65 + i]) * size) for i in range(n))


def _expected_plain(n=5, size=30, base_offset=0):
    return [(base_offset + i, i * 10, b"k%d" % i, bytes([65 + i]) * size, []) for i in range(n)]


def _zstd_streamed(data):
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
        for i in range(0, len(data), 7):
            w.write(data[i:i + 7])
    return out.getvalue()


def _xerial(data, block):
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(data), block):
        c = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(c)) + c
    return out


FRAMINGS = [
    ("zstd without content size", 4, lambda d: zstandard.ZstdCompressor(write_content_size=False).compress(d)),
    ("zstd streamed", 4, _zstd_streamed),
    ("zstd two frames", 4, lambda d: zstandard.ZstdCompressor().compress(d[:50]) + zstandard.ZstdCompressor()
     .compress(d[50:])),
    ("gzip two members", 1, lambda d: zlib.compress(d[:40], 6, 31) + zlib.compress(d[40:], 6, 31)),
    ("zlib header", 1, lambda d: zlib.compress(d)),
    ("raw snappy (no xerial header)", 2, lambda d: bytes(cramjam.snappy.compress_raw(d))),
    ("xerial small blocks", 2, lambda d: _xerial(d, 16)),
    ("xerial concatenated streams", 2, lambda d: _xerial(d[:60], 32) + _xerial(d[60:], 32)),
    ("lz4 with content size and checksum", 3,
     lambda d: lz4.frame.compress(d, block_linked=False, store_size=True, content_checksum=True)),
    ("lz4 256 KB blocks", 3,
     lambda d: lz4.frame.compress(d, block_linked=False, block_size=lz4.frame.BLOCKSIZE_MAX256KB)),
]


@pytest.mark.parametrize("codec, compress", [f[1:] for f in FRAMINGS], ids=[f[0] for f in FRAMINGS])
def test_foreign_framings_decode(codec, compress):
    buf = _batch(compress(_plain_records()), 5, codec=codec, base_offset=100)
    assert R.RecordBatch(buf).is_valid()
    assert _records_of(buf) == _expected_plain(base_offset=100)
    assert _columns_records(decode_columns(buf)) == _expected_plain(base_offset=100)


def test_zstd_frame_has_no_content_size_when_streamed():
    assert zstandard.frame_content_size(_zstd_streamed(_plain_records())) == -1
    assert zstandard.frame_content_size(zstandard.ZstdCompressor(write_content_size=False).compress(b"xy")) == -1


def test_lz4_linked_blocks_rejected():
    data = _plain_records(n=40, size=4000)  # > 64 KB, so there is a second block that could link to the first
    buf = _batch(lz4.frame.compress(data, block_linked=True), 40, codec=3)
    with pytest.raises(InvalidRecordError, match="Dependent block stream is unsupported"):
        list(R.RecordBatch(buf))
    with pytest.raises(InvalidRecordError, match="Dependent block"):
        decode_columns(buf)
    ok = _batch(lz4.frame.compress(data, block_linked=False), 40, codec=3)
    assert _records_of(ok) == _expected_plain(n=40, size=4000)


@pytest.mark.parametrize("codec, garbage", [
    (1, b"\x1f\x8b\x08\x00not really gzip"),
    (2, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09zz"),
    (3, b"\x04\x22\x4d\x18\x60\x40\x82\x05\x00\x00\x00abc"),
    (4, b"\x28\xb5\x2f\xfd garbage"),
    (3, b"not an lz4 frame"),
])
def test_undecodable_streams_are_invalid_records(codec, garbage):
    with pytest.raises(InvalidRecordError, match="offset 0"):
        list(R.RecordBatch(_batch(garbage, 1, codec=codec)))


# ---------------------------------------------------------------------------------------------------------------
# In-place rewrites


def _writable(kind, data):
    if kind == "bytearray":
        return bytearray(data), None
    if kind == "numpy":
        return np.frombuffer(bytearray(data), np.uint8).copy(), None
    mm = mmap.mmap(-1, len(data) + 100)
    mm[:len(data)] = data
    return memoryview(mm), mm


@pytest.mark.parametrize("kind", ["bytearray", "numpy", "mmap"])
@pytest.mark.parametrize("codec", [0, 4], ids=["none", "zstd"])
def test_set_base_offset_and_epoch_keep_crc(kind, codec):
    first = R.build_batch([b"a", b"b"], timestamps=[1, 2], compression=codec)
    second = _sample_batch(codec)
    buf, mm = _writable(kind, first + second)
    try:
        R.set_base_offset(buf, len(first), 1_000_000)
        R.set_partition_leader_epoch(buf, len(first), 17)
        batches = list(R.iter_batches(buf, 0, len(first) + len(second)))
        assert [b.base_offset for b in batches] == [0, 1_000_000]
        assert batches[1].partition_leader_epoch == 17 and batches[1].crc == R.RecordBatch(second).crc
        assert all(b.is_valid() for b in batches)
        assert _records_of(bytes(buf[len(first):len(first) + len(second)])) == _sample_expected(1_000_000)
        del batches
    finally:
        if mm is not None:
            buf.release()
            mm.close()


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_set_log_append_time(codec):
    buf = bytearray(_sample_batch(codec))
    crc_before = R.RecordBatch(buf).crc
    R.set_log_append_time(buf, 0, 1_900_000_000_000)
    batch = R.RecordBatch(buf)
    assert batch.is_valid() and batch.crc != crc_before
    assert batch.timestamp_type == 1 and batch.attributes & 0x08
    assert batch.max_timestamp == 1_900_000_000_000
    assert batch.base_timestamp == SAMPLE[0][2]  # untouched: only attributes, MaxTimestamp and CRC change
    assert {(r.timestamp, r.timestamp_type) for r in batch} == {(1_900_000_000_000, 1)}
    cols = decode_columns(buf)
    assert set(cols["timestamp"].tolist()) == {1_900_000_000_000} and set(cols["timestamp_type"].tolist()) == {1}
    again = bytearray(buf)
    R.set_log_append_time(again, 0, 1_900_000_000_000)
    assert again == buf


def test_rewrites_need_a_writable_complete_header():
    with pytest.raises((TypeError, BufferError)):
        R.set_base_offset(GOLDEN, 0, 5)
    with pytest.raises(CorruptRecordError):
        R.set_base_offset(bytearray(GOLDEN[:40]), 0, 5)
    with pytest.raises(CorruptRecordError, match="truncated"):
        R.set_log_append_time(bytearray(GOLDEN[:-1]), 0, 5)
    with pytest.raises(ValueError):
        R.set_partition_leader_epoch(bytearray(GOLDEN), 200, 1)


# ---------------------------------------------------------------------------------------------------------------
# Views, batch iteration, columns


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "numpy", "mmap"])
def test_record_batch_over_any_buffer(kind):
    data = b"\x00" * 13 + _sample_batch(2)
    if kind == "mmap":
        mm = mmap.mmap(-1, len(data))
        mm[:] = data
        buffer = mm
    else:
        buffer = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview,
                  "numpy": lambda d: np.frombuffer(d, np.uint8)}[kind](data)
    batch = R.RecordBatch(buffer, 13)
    assert batch.position == 13 and batch.is_valid()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()] == _sample_expected()
    if kind == "mmap":
        with pytest.raises(BufferError):
            mm.close()  # the view keeps the mapping alive
        del batch
        mm.close()


def test_iteration_is_lazy_and_records_are_plain_objects():
    it = iter(R.RecordBatch(_sample_batch(4)))
    first = next(it)
    assert (first.offset, first.key, first.timestamp_type) == (0, b"key-0", 0)
    assert first == R.Record(0, SAMPLE[0][2], 0, b"key-0", SAMPLE[0][1], SAMPLE[0][3])
    assert "key-0" in repr(first)
    assert len(list(it)) == len(SAMPLE) - 1
    with pytest.raises(AttributeError):
        first.extra = 1


def test_iter_batches_stops_at_incomplete_tail_and_counts():
    batches = [R.build_batch([b"x"] * n, base_offset=10 * n, compression=n % 5) for n in range(1, 6)]
    data = b"".join(batches)
    for cut in (0, 5, 16, 17, 60, len(batches[-1]) - 1):
        stream = data[:len(data) - cut] if cut else data
        got = list(R.iter_batches(stream))
        assert len(got) == (5 if cut == 0 else 4)
        assert R.count_records(stream) == sum(b.record_count for b in got)
    assert [b.base_offset for b in R.iter_batches(data)] == [10, 20, 30, 40, 50]
    assert [b.position for b in R.iter_batches(data)] == [sum(map(len, batches[:i])) for i in range(5)]
    start = len(batches[0])
    assert [b.base_offset for b in R.iter_batches(data, start, start + len(batches[1]))] == [20]
    assert decode_columns(data, start)["offset"].tolist()[:2] == [20, 21]


def test_iter_batches_raises_at_illegal_length():
    bad = bytearray(GOLDEN)
    bad[8:12] = struct.pack(">i", 3)
    with pytest.raises(CorruptRecordError, match="position 84"):
        list(R.iter_batches(GOLDEN + bytes(bad)))
    with pytest.raises(ValueError):
        R.iter_batches(GOLDEN, 10, 5)


def test_decode_columns_layout():
    batches = [_sample_batch(c, base_offset=100 * c) for c in CODECS]
    data = b"".join(batches) + batches[0][:30]
    cols = decode_columns(data)
    n = len(SAMPLE) * len(CODECS)
    assert cols["batches"] == len(CODECS) and cols["next_position"] == len(data) - 30
    assert cols["offset"].dtype == np.int64 and cols["timestamp"].dtype == np.int64
    assert cols["timestamp_type"].dtype == np.int8
    assert cols["key_offsets"].dtype == np.int32 and cols["key_offsets"].shape == (n + 1,)
    assert cols["key_valid"].dtype == np.bool_ and cols["keys"].dtype == np.uint8
    assert cols["header_offsets"].shape == (n + 1,)
    assert cols["key_valid"].tolist()[:3] == [True, False, True]
    assert cols["key_offsets"][2] == cols["key_offsets"][1]  # null key: zero length, marked invalid
    expected = [rec for c in CODECS for rec in _sample_expected(100 * c)]
    assert _columns_records(cols) == expected
    assert cols["values"].nbytes == sum(len(r[1] or b"") for r in SAMPLE) * len(CODECS)
    empty = decode_columns(b"")
    assert empty["offset"].shape == (0,) and empty["key_offsets"].tolist() == [0]


# ---------------------------------------------------------------------------------------------------------------
# Properties

headers_st = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
record_st = st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=300),
                      st.integers(0, 2**45), headers_st)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_st, min_size=1, max_size=25), st.integers(0, 2**40))
def test_round_trip_property(recs, base_offset):
    keys, values, stamps, headers = ([r[i] for r in recs] for i in range(4))
    expected = [(base_offset + i, r[2], r[0], r[1], r[3]) for i, r in enumerate(recs)]
    plain_size = len(R.build_batch(values, keys, stamps, headers))
    batches = []
    for codec in CODECS:
        batch = R.build_batch(values, keys, stamps, headers, base_offset=base_offset, compression=codec)
        view = R.RecordBatch(batch)
        assert view.is_valid() and view.compression == codec
        assert (view.base_timestamp, view.max_timestamp) == (stamps[0], max(stamps))
        assert view.last_offset == base_offset + len(recs) - 1
        assert _records_of(batch) == expected
        assert _columns_records(decode_columns(batch)) == expected
        builder = R.BatchBuilder(compression=codec)
        for k, v, ts, h in recs:
            builder.append(v, k, ts, h)
        assert builder.build(base_offset) == batch
        assert builder.size_in_bytes == plain_size
        batches.append(batch)
    assert _columns_records(decode_columns(b"".join(batches))) == expected * len(CODECS)


def _control_batch(base_offset: int, commit: bool = True) -> bytes:
    """A transaction marker as a Kafka broker writes it (attributes: transactional | control), CRC recomputed."""
    key = struct.pack(">hh", 0, 1 if commit else 0)        # ControlRecordType: version 0, COMMIT 1 / ABORT 0
    value = struct.pack(">hi", 0, 7)                        # EndTransactionMarker: version 0, coordinator epoch
    raw = bytearray(R.build_batch([value], keys=[key], base_offset=base_offset, producer_id=9, producer_epoch=0,
                                is_transactional=True))
    attributes = struct.unpack_from(">h", raw, 21)[0] | 0x20  # the control bit
    struct.pack_into(">h", raw, 21, attributes)
    struct.pack_into(">I", raw, 17, R.crc32c(bytes(raw[21:])))
    return bytes(raw)


def test_control_batches_are_skipped_by_record_readers_as_kafka_consumers_skip_them():
    """A Kafka log dir holds transaction markers between data batches: readers give records, never a marker."""
    buf = (R.build_batch([b"a", b"b"], base_offset=0) + _control_batch(2) + R.build_batch([b"c"], base_offset=3)
           + _control_batch(4, commit=False))
    kinds = [b.is_control for b in R.iter_batches(buf)]
    assert kinds == [False, True, False, True]  # the markers are there (and CRC-valid)
    for b in R.iter_batches(buf):
        b.validate()
    assert [(r.offset, r.value) for r in R.iter_records(buf)] == [(0, b"a"), (1, b"b"), (3, b"c")]
    assert [(r.offset, r.value) for r in R.iter_records(buf, min_offset=2)] == [(3, b"c")]
    cols = decode_columns(buf)
    assert list(cols["offset"]) == [0, 1, 3] and list(cols["values"][:3]) == list(b"abc")
    assert R.next_offset_after(buf) == 5  # a reader moves on past the last marker


def _consumer_tuples(stream, limit, pool=None, no_headers=None):
    from kafkalog.structs import ConsumerRecord
    out = []
    R.take_consumer_records(stream, out, limit, ConsumerRecord, "t", 3, -1, no_headers, pool)
    return out


def _expected_consumer_record(i, ts0=1_700_000_000_000):
    """What record i of _pool_log is, as kafka-python's ConsumerRecord fields."""
    key = None if i % 5 == 0 else b"k%d" % i
    value = None if i % 7 == 0 else b"v%d" % i * (1 + i % 3)
    headers = [("h", b"%d" % i)] if i % 2 else []
    hsize = sum(len(k.encode()) + len(v) for k, v in headers) if headers else -1
    return ("t", 3, -1, i, ts0 + i // 4, 0, key, value, headers, None, -1 if key is None else len(key),
            -1 if value is None else len(value), hsize)


def _pool_log(n):
    ts0 = 1_700_000_000_000
    return b"".join(R.build_batch([_expected_consumer_record(i)[7] for i in range(b, b + 10)],
                                  keys=[_expected_consumer_record(i)[6] for i in range(b, b + 10)],
                                  timestamps=[ts0 + i // 4 for i in range(b, b + 10)],
                                  headers=[_expected_consumer_record(i)[8] for i in range(b, b + 10)],
                                  base_offset=b) for b in range(0, n, 10))


def test_consumer_records_are_built_from_the_record_bytes():
    buf = _pool_log(40)
    recs = _consumer_tuples(R.iter_records(buf, min_offset=3, max_offset=33), 100)
    assert [tuple(r) for r in recs] == [_expected_consumer_record(i) for i in range(3, 33)]
    assert all(type(r).__name__ == "ConsumerRecord" for r in recs)
    # the limit, and the next offset it returns
    stream = R.iter_records(buf)
    out = []
    from kafkalog.structs import ConsumerRecord
    assert R.take_consumer_records(stream, out, 7, ConsumerRecord, "t", 3, -1) == 7
    assert R.take_consumer_records(stream, out, 100, ConsumerRecord, "t", 3, -1) == 40
    assert R.take_consumer_records(stream, out, 100, ConsumerRecord, "t", 3, -1) == -1
    assert [r.offset for r in out] == list(range(40))


def test_a_record_pool_refills_only_records_nobody_else_holds():
    """take_consumer_records with a RecordPool refills the records of its last two calls that only the pool still
    references; every record an app keeps stays as it was returned, whatever it holds it by."""
    buf = _pool_log(400)
    stream = R.iter_records(buf)
    pool = R.RecordPool()
    kept, held_items, dropped_ids = [], [], set()
    refilled = 0
    for call in range(40):
        recs = _consumer_tuples(stream, 10, pool)
        assert len(recs) == 10 and len(pool) <= 20
        refilled += sum(id(r) in dropped_ids for r in recs)
        if call % 4 == 0:
            kept.append((recs, list(range(10 * call, 10 * call + 10))))  # the whole list
        elif call % 4 == 1:
            kept.append(([recs[3]], [10 * call + 3]))  # one record of it
            dropped_ids.update(id(r) for i, r in enumerate(recs) if i != 3)
        elif call % 4 == 2:
            held_items.append((recs[5].offset, recs[5].value, recs[5].headers))  # its fields, not the record
            dropped_ids.update(id(r) for r in recs)
        else:
            dropped_ids.update(id(r) for r in recs)
        del recs
    assert refilled > 0  # the pool did refill dropped records
    for recs, offsets in kept:
        assert [tuple(r) for r in recs] == [_expected_consumer_record(o) for o in offsets]
    for offset, value, headers in held_items:
        want = _expected_consumer_record(offset)
        assert (value, headers) == (want[7], want[8])


def test_a_refilled_record_takes_new_values_in_place_only_where_nobody_else_holds_them():
    """A refilled record's offset, timestamp, key and value objects that only the record references are rewritten
    in place (same digit count, same length); any the app still holds (a field kept after the record was dropped)
    stay as they were; a rewritten bytes object hashes as its new value."""
    ts0 = 1_700_000_000_000

    def value(i):
        return b"value-%06d" % i

    def key(i):
        return None if i % 9 == 0 else b"k%05d" % i

    buf = b"".join(R.build_batch([value(i) for i in range(b, b + 10)], keys=[key(i) for i in range(b, b + 10)],
                                 timestamps=[ts0 + 1000 * i for i in range(b, b + 10)], base_offset=b)
                   for b in range(0, 600, 10))
    stream = R.iter_records(buf)
    pool = R.RecordPool()
    held = []  # (object, a copy made by value): fields the app kept
    for call in range(60):
        recs = _consumer_tuples(stream, 10, pool)
        want = [(10 * call + j, ts0 + 1000 * (10 * call + j), key(10 * call + j), value(10 * call + j))
                for j in range(10)]
        assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == want
        for r in recs:
            assert hash(r.value) == hash(bytes(bytearray(r.value)))  # a cached hash of the old value is not kept
        if call % 3 == 0:
            r = recs[call % 10]
            held += [(r.offset, int(str(r.offset))), (r.timestamp, int(str(r.timestamp))),
                     (r.value, bytes(bytearray(r.value)))]
            if r.key is not None:
                held.append((r.key, bytes(bytearray(r.key))))
        for r in recs:
            hash(r.value)  # caches the hash in the bytes object that a later call may rewrite
        del recs, r
    assert len(held) >= 60
    assert all(obj == copy for obj, copy in held)


def test_a_record_pool_does_not_keep_large_records():
    big = b"x" * 4096
    stream = R.iter_records(R.build_batch([big, b"small", big]))
    pool = R.RecordPool()
    recs = _consumer_tuples(stream, 10, pool)
    assert [r.value for r in recs] == [big, b"small", big]
    assert len(pool) == 1  # only the small record


def test_consumer_record_fields_read_the_tuple_items_in_place():
    """kafkalog's ConsumerRecord reads its fields through member descriptors (fields_as_members, applied when
    kafkalog is imported): the same values as the items, and the NamedTuple's own API unchanged."""
    import copy
    import pickle

    from kafkalog.structs import ConsumerRecord
    assert all(type(ConsumerRecord.__dict__[f]).__name__ == "member_descriptor" for f in ConsumerRecord._fields)
    built = _consumer_tuples(R.iter_records(_pool_log(20)), 20)
    made = ConsumerRecord(*_expected_consumer_record(3))
    for r in [*built, made]:
        assert tuple(getattr(r, f) for f in ConsumerRecord._fields) == tuple(r)
    assert made._replace(key=b"x").key == b"x" and made._asdict()["value"] == made[7]
    assert pickle.loads(pickle.dumps(made)) == made and copy.copy(made) == made and copy.deepcopy(made) == made
    with pytest.raises(TypeError):
        ConsumerRecord(*range(12))  # a ConsumerRecord has its 13 items, always
    with pytest.raises(TypeError):
        ConsumerRecord._make(range(14))
    with pytest.raises(AttributeError):
        made.key = b"y"
    R.fields_as_members(ConsumerRecord)  # idempotent
    assert made.value == made[7]
    for bad in (int, tuple, type("T", (tuple,), {"_fields": ("a",)})):
        with pytest.raises(TypeError):
            R.fields_as_members(bad)
