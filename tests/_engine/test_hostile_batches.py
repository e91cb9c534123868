"""Hostile record batches a producer may send: decompression bombs, non-contiguous offset deltas, record timestamps
hidden behind the batch header. Each batch here is a correct v2 batch (right CRC) built with the real codecs; only
its contents are hostile.

Memory is measured in a fresh child process (ru_maxrss is a peak, so only a new process gives a meaningful one):
the growth of the peak across one append (or one read) must stay far below the bomb's plaintext.
"""

import json
import struct
import subprocess
import sys
import time
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from kafkalog._engine import batch as R
from kafkalog._engine.codecs import _CODEC_NAMES
from kafkalog._engine.columns import decode_columns
from kafkalog.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError

from .test_records import varint  # zigzag varint, as records carry it

MiB = 1 << 20
T0 = 1_700_000_000_000
GROWTH_LIMIT_MB = 100


# ---------------------------------------------------------------------------------------------------------------
# Building batches by hand

def record_head(offset_delta, ts_delta, value_len, key=None):
    """A record's bytes up to (not including) its value, and the bytes after it: (head, tail)."""
    key_field = varint(-1) if key is None else varint(len(key)) + key
    body_head = b"\x00" + varint(ts_delta) + varint(offset_delta) + key_field + varint(value_len)
    tail = varint(0)  # no headers
    return varint(len(body_head) + value_len + len(tail)) + body_head, tail


def record(offset_delta, ts_delta, value, key=None):
    head, tail = record_head(offset_delta, ts_delta, len(value), key)
    return head + value + tail


def batch(section, count, *, codec=0, base_ts=T0, max_ts=None, last_offset_delta=None, base_offset=0):
    """A v2 batch around an encoded (and, with a codec, compressed) records section, with a right CRC."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    tail = struct.pack(">hiqqqhii", codec, lod, base_ts, base_ts if max_ts is None else max_ts, -1, -1, -1,
                       count) + section
    crc = R.crc32c(tail)
    return struct.pack(">qiib", base_offset, len(tail) + 9, -1, 2) + struct.pack(">I", crc) + tail


def _zeros(total, step=MiB):
    chunk = bytes(step)
    while total > 0:
        yield chunk[:min(step, total)]
        total -= step


def _valid_records_stream(count, value_len):
    """Plaintext of `count` correct records, each a value of `value_len` zeros, produced piece by piece."""
    for i in range(count):
        head, tail = record_head(i, 0, value_len)
        yield head
        yield from _zeros(value_len)
        yield tail


def _gzip(pieces):
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return b"".join(c.compress(p) for p in pieces) + c.flush()


def _zstd(pieces, **params):
    cctx = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters.from_level(3, **params)) if params \
        else zstandard.ZstdCompressor()
    c = cctx.compressobj()
    return b"".join(c.compress(p) for p in pieces) + c.flush()


def _lz4(pieces):
    c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                     content_checksum=False)
    return c.begin() + b"".join(c.compress(p) for p in pieces) + c.flush()


def _snappy_liar(declared):
    """A short raw snappy block whose length preamble claims `declared` bytes (it decodes to far fewer)."""
    real = bytes(cramjam.snappy.compress_raw(b"\x00" * 2000))
    k = 0
    while True:  # skip the real preamble
        b = real[k]
        k += 1
        if b < 0x80:
            break
    uvar = bytearray()
    n = declared
    while n >= 0x80:
        uvar.append((n & 0x7F) | 0x80)
        n >>= 7
    uvar.append(n)
    return bytes(uvar) + real[k:]


def _xerial(block):
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


# name -> (codec, section builder, records count)
BOMBS = {
    "gzip 256 MiB of zeros": (1, lambda: _gzip(_zeros(256 * MiB)), 1000),
    "zstd 512 MiB of zeros": (4, lambda: _zstd(_zeros(512 * MiB)), 1000),
    "zstd 512 MiB of zeros, 128 MiB window": (4, lambda: _zstd(_zeros(512 * MiB), window_log=27), 1000),
    "lz4 512 MiB of zeros": (3, lambda: _lz4(_zeros(512 * MiB)), 1000),
    "snappy raw block claiming 512 MiB": (2, lambda: _snappy_liar(512 * MiB), 1000),
    "snappy xerial block claiming 512 MiB": (2, lambda: _xerial(_snappy_liar(512 * MiB)), 1000),
    # correct records, so only a plaintext bound stops them
    "zstd one record of 512 MiB": (4, lambda: _zstd(_valid_records_stream(1, 512 * MiB)), 1),
    "zstd 10 records of 8 MiB (past 64 MiB)": (4, lambda: _zstd(_valid_records_stream(10, 8 * MiB)), 10),
    "gzip 1 record then 256 MiB of zeros": (1, lambda: _gzip([record(0, 0, b"v"), *_zeros(256 * MiB)]), 1),
}

_CHILD = r"""
import json, resource, sys, tempfile
import kafkalog
from kafkalog._engine.columns import decode_columns
from kafkalog._engine.batch import RecordBatch, build_batch

path, mode, mmb = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "rb") as f:
    data = f.read()


def peak_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


out = {}
with tempfile.TemporaryDirectory() as d:
    store = kafkalog.LogStore(d, exclusive=True, maintenance=False)
    store.create_topic("t", 1, {"max.message.bytes": mmb})
    log = store.log("t", 0)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):  # warm every codec, the append and the read paths
        log.append_records(build_batch([b"warm"] * 3, compression=codec))
    list(log.records())
    log.read_columns()
    leo = log.log_end_offset
    buf = bytearray(data)
    before = peak_kb()
    try:
        if mode == "append":
            out["result"] = log.append_records(buf)
        else:  # stored unchecked through the trusted path, then read back
            b = RecordBatch(buf)
            log.append_built(buf, b.record_count, b.max_timestamp)
            if mode == "records":
                out["result"] = sum(1 for _ in log.records(leo))
            elif mode == "columns":
                out["result"] = len(log.read_columns(leo)["offset"])
            else:
                out["result"] = len(decode_columns(log.read(leo, 1 << 30))["offset"])
    except Exception as e:
        out["error"] = type(e).__name__
        out["message"] = str(e)
    out["growth_mb"] = (peak_kb() - before) / 1024
    out["appended"] = log.log_end_offset - leo
    store.close()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def bomb_file(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            codec, build, count = BOMBS[name]
            path = tmp_path_factory.mktemp("bombs") / "batch.bin"
            path.write_bytes(batch(build(), count, codec=codec))
            made[name] = path
        return made[name]

    return get


def _run_child(child_env, path, mode, max_message_bytes=4 * MiB):
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path), mode, str(max_message_bytes)], env=child_env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


_REFUSED = {c.__name__ for c in (RecordTooLargeError, InvalidRecordError, CorruptRecordError)}


@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_is_refused_with_bounded_memory(bomb_file, child_env, name):
    """max.message.bytes 4 MiB, so every bomb is within the compressed-size bound and reaches decompression."""
    out = _run_child(child_env, bomb_file(name), "append")
    assert out["growth_mb"] < GROWTH_LIMIT_MB, out
    assert out.get("error") in _REFUSED, out
    assert out["appended"] == 0, out
    msg = out["message"]
    assert "offset 0" in msg and _CODEC_NAMES[BOMBS[name][0]] in msg, msg


@pytest.mark.parametrize("mode", ["records", "columns"])
@pytest.mark.parametrize("name", ["zstd 512 MiB of zeros", "lz4 512 MiB of zeros", "gzip 256 MiB of zeros",
                                  "snappy xerial block claiming 512 MiB", "gzip 1 record then 256 MiB of zeros"])
def test_stored_bomb_readers_stay_bounded(bomb_file, child_env, name, mode):
    """A bad batch already in a log (written before validation, or through the trusted path) fails its readers
    without decompressing it whole."""
    out = _run_child(child_env, bomb_file(name), mode)
    assert out["growth_mb"] < GROWTH_LIMIT_MB, out
    assert out.get("error") in _REFUSED, out


LEGIT = ["gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", LEGIT)
def test_highly_compressible_legit_batches_still_append(open_store, codec):
    """10 MB of zeros in 1000 records: far more plaintext than max.message.bytes (1 MiB), tiny compressed."""
    store = open_store()
    store.create_topic("t", 1)
    log = store.log("t", 0)
    values = [bytes(10_000)] * 1000
    raw = R.build_batch(values, timestamps=[T0 + i for i in range(1000)], compression=codec)
    assert len(raw) < 1 << 20
    assert log.append_records(raw) == (0, 999)
    assert [r.value for r in log.records()] == values
    cols = log.read_columns()
    assert len(cols["offset"]) == 1000 and len(cols["values"]) == 10_000_000


def test_legit_batch_far_above_64_mib_with_many_records(open_store):
    """The bound grows with the record count: 200 MiB of plaintext in 400 records of 512 KiB passes."""
    store = open_store()
    store.create_topic("t", 1)
    log = store.log("t", 0)
    section = _zstd(_valid_records_stream(400, 512 * 1024))
    assert len(section) < 1 << 20
    assert log.append_records(batch(section, 400, codec=4)) == (0, 399)


def test_limits_of_check_for_append():
    """check_for_append's bounds: 64 MiB of plaintext whatever the count; a record above max(max.message.bytes,
    16 MiB) is refused even in a batch whose total is allowed."""
    ok = batch(_zstd(_valid_records_stream(3, 20 * MiB)), 3, codec=4)
    with pytest.raises(RecordTooLargeError, match=r"zstd.*offset 0|offset 0.*zstd"):
        R.RecordBatch(ok).check_for_append(1 << 20)
    assert R.RecordBatch(ok).check_for_append(32 << 20) == (T0, T0)
    small = batch(_gzip(_valid_records_stream(1, 60 * MiB)), 1, codec=1)
    assert R.RecordBatch(small).check_for_append(61 << 20) == (T0, T0)
    with pytest.raises(RecordTooLargeError, match="gzip"):
        R.RecordBatch(small).check_for_append(1 << 20)


# ---------------------------------------------------------------------------------------------------------------
# Offset deltas


def _deltas_batch(deltas, codec, lod=None):
    section = b"".join(record(d, i, b"v%d" % i) for i, d in enumerate(deltas))
    if codec == 1:
        section = zlib.compress(section, 6, 31)
    return batch(section, len(deltas), codec=codec, last_offset_delta=lod, max_ts=T0 + len(deltas) - 1)


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
@pytest.mark.parametrize("deltas", [[0, 5, 1], [0, 1, 1], [1, 2, 3], [0, 2, 1]], ids=str)
def test_non_contiguous_offset_deltas_are_refused(open_store, codec, deltas):
    raw = _deltas_batch(deltas, codec)
    with pytest.raises(InvalidRecordError, match="offset delta") as e:
        R.RecordBatch(raw).check_for_append(1 << 20)
    assert e.value.code == 87
    store = open_store()
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append(b"before", timestamp=T0)
    with pytest.raises(InvalidRecordError, match="offset delta"):
        log.append_records(raw)
    assert log.log_end_offset == 1
    assert [(r.offset, r.value) for r in log.records()] == [(0, b"before")]


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
def test_compacted_batches_with_gaps_still_read(codec):
    """Compaction keeps LastOffsetDelta and drops records: gaps are legal in a stored batch, only a produce
    refuses them."""
    raw = _deltas_batch([0, 4], codec, lod=4)
    b = R.RecordBatch(raw)
    b.validate(decompress=True)
    assert [r.offset for r in b] == [0, 4]
    assert list(decode_columns(raw)["offset"]) == [0, 4]
    with pytest.raises(InvalidRecordError):
        b.check_for_append(1 << 20)


# ---------------------------------------------------------------------------------------------------------------
# Record timestamps


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_check_for_append_returns_the_records_min_and_max(codec):
    ts = [T0 + 5, T0 - 3, T0 + 9, T0]
    raw = R.build_batch([b"a", b"b", b"c", b"d"], timestamps=ts, compression=codec)
    assert R.RecordBatch(raw).check_for_append(1 << 20) == (T0 - 3, T0 + 9)
    # the smallest timestamp ignores records without one (negative: NO_TIMESTAMP)
    section = record(0, 0, b"a") + record(1, T0 + 7 - -1, b"b")
    assert R.RecordBatch(batch(section, 2, base_ts=-1, max_ts=T0 + 7)).check_for_append(1 << 20) == (T0 + 7, T0 + 7)


def _forged_max(ts, max_ts, codec=0):
    """A batch of records with timestamps ts whose header claims max_ts (CRC right)."""
    section = b"".join(record(i, t - ts[0], b"v%d" % i) for i, t in enumerate(ts))
    if codec == 1:
        section = zlib.compress(section, 6, 31)
    elif codec == 4:
        section = zstandard.ZstdCompressor().compress(section)
    return batch(section, len(ts), codec=codec, base_ts=ts[0], max_ts=max_ts)


@pytest.mark.parametrize("codec", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_record_past_after_max_hidden_behind_header_is_refused(open_store, codec):
    store = open_store()
    store.create_topic("t", 1, {"message.timestamp.after.max.ms": 60_000})
    log = store.log("t", 0)
    now = int(time.time() * 1000)
    raw = _forged_max([now, now + 3_600_000, now], now, codec)
    with pytest.raises(InvalidTimestampError) as e:
        log.append_records(raw)
    assert e.value.code == 32
    assert log.log_end_offset == 0


@pytest.mark.parametrize("codec", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_record_before_before_max_not_first_is_refused(open_store, codec):
    store = open_store()
    store.create_topic("t", 1, {"message.timestamp.before.max.ms": 60_000})
    log = store.log("t", 0)
    now = int(time.time() * 1000)
    with pytest.raises(InvalidTimestampError):
        log.append_records(_forged_max([now, now, now - 3_600_000, now], now, codec))
    assert log.log_end_offset == 0
    log.append_records(_forged_max([now, now - 1000, now], now, codec))
    assert log.log_end_offset == 3


@pytest.mark.parametrize("codec", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_offset_for_time_finds_every_record_of_accepted_batches(open_store, codec):
    """Headers claiming a max below (or above) the records' are stored with the records' true max (Kafka's
    LogValidator recomputes it), so the time index and offset_for_time see every record."""
    store = open_store()
    store.create_topic("t", 1)
    log = store.log("t", 0)
    batches = [([T0, T0 + 100, T0 + 50], T0), ([T0 + 200, T0 + 150], T0 + 1000), ([T0 + 300, T0 + 400], T0 + 400)]
    for ts, claimed in batches:
        log.append_records(_forged_max(ts, claimed, codec))
    stored = list(R.iter_batches(log.read(0, 1 << 20)))
    assert [b.max_timestamp for b in stored] == [T0 + 100, T0 + 200, T0 + 400]
    assert all(b.is_valid() for b in stored)
    recs = list(log.records())
    assert [r.timestamp for r in recs] == [t for ts, _ in batches for t in ts]
    for r in recs:
        found = log.offset_for_time(r.timestamp)
        assert found is not None and found.offset <= r.offset and found.timestamp >= r.timestamp, r
    assert (log.offset_for_time(-3).offset, log.offset_for_time(-3).timestamp) == (6, T0 + 400)
    assert log.offset_for_time(T0 + 60).offset == 1
