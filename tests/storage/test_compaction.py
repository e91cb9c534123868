"""Log compaction (cleanup.policy=compact): the compiled offset map and batch filter, and the cleaner against a model.

The model keeps every record ever appended. After each step the log must hold only records that were appended, at
their offsets, in order; every key's latest record (unless it is a tombstone whose time is up); below the cleaned end
at most one record per key, its latest there; the active segment untouched; and the same after reopening in each
mode.
"""

import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafkalog
from kafkalog._engine.batch import RecordBatch, build_batch, iter_batches
from kafkalog._engine.compaction import OffsetMap, filter_batches
from kafkalog.errors import InvalidRecordError

T0 = 1_700_000_000_000
DRM = 1000  # delete.retention.ms of the model's topic


# ------------------------------------------------------------------------------------------------ the offset map

def test_offset_map_keeps_the_latest_offset_per_key_in_bounded_memory():
    m = OffsetMap(24 * 1024)  # 1024 slots, at most 921 entries
    assert m.capacity == 1024 and m.memory_bytes == 24 * 1024 and m.max_entries == 921
    for i in range(921):
        assert m.put(b"key-%d" % i, i)
    assert not m.full
    assert m.put(b"key-5", 5000)  # a key already present is always updated
    assert not m.put(b"one-more", 1)  # a new key is refused when full
    assert m.full and m.size == 921
    assert m.get(b"key-5") == 5000 and m.get(b"key-920") == 920
    assert m.get(b"one-more") == -1 and m.get(b"") == -1
    assert m.latest_offset == 5000
    m.clear()
    assert m.size == 0 and not m.full and m.get(b"key-5") == -1


def test_offset_map_grows_with_its_keys_up_to_its_bound():
    m = OffsetMap(24 * 4096, initial_bytes=24 * 16)
    assert (m.capacity, m.max_capacity) == (16, 4096)
    for i in range(3000):
        assert m.put(b"k%d" % i, i)
    assert m.capacity == 4096 and m.memory_bytes == 4096 * 24
    assert all(m.get(b"k%d" % i) == i for i in range(3000))  # nothing lost by the doublings
    n = 3000
    while m.put(b"k%d" % n, n):
        n += 1
    assert n == int(4096 * 0.9) and m.full and m.capacity == 4096


def test_offset_map_digests_tell_many_similar_keys_apart():
    m = OffsetMap(24 << 20)
    keys = [b"user-%07d" % i for i in range(300_000)] + [b"", b"\x00", b"\x00\x00", b"x" * 17, b"x" * 16]
    for i, k in enumerate(keys):
        assert m.put(k, i)
    assert m.size == len(keys)  # no two keys share a digest
    assert all(m.get(k) == i for i, k in enumerate(keys))


def test_offset_map_add_batches_maps_keys_of_every_codec_and_stops_when_full():
    buf = b"".join(build_batch([b"v"] * 4, [b"a", b"b", b"a", None], base_offset=10 * i, compression=codec)
                   for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]))
    m = OffsetMap(1 << 16)
    assert m.add_batches(buf) == (len(buf), 44)
    assert (m.get(b"a"), m.get(b"b"), m.size) == (42, 41, 2)
    m.clear()
    pos, reached = m.add_batches(buf, 11, 31)  # only offsets in [start, stop)
    assert reached == 31 and pos == sum(b.size_in_bytes for b in iter_batches(buf) if b.base_offset < 40)
    assert (m.get(b"a"), m.get(b"b")) == (30, 21)
    m.clear()
    first = next(iter_batches(buf)).size_in_bytes
    assert m.add_batches(buf, 0, 100, 0, 1) == (first, 4)  # max_bytes: at least one batch, then stop
    assert m.add_batches(buf, 0, 100, first, 1)[1] == 14
    small = OffsetMap(16 * 24, load_factor=0.125)  # two entries
    wide = b"".join(build_batch([b"v"] * 2, [b"k%d" % (2 * i), b"k%d" % (2 * i + 1)], base_offset=2 * i)
                    for i in range(3))
    assert small.add_batches(wide)[1] == 2  # the second batch's keys did not fit: mapping stops at its base
    assert small.full


# ------------------------------------------------------------------------------------------------ the batch filter

@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_filter_batches_keeps_offsets_timestamps_headers_and_producer_facts(codec):
    keys = [b"a", b"b", b"a", b"c", b"b"]
    vals = [b"1", b"2", b"3", None, b"5"]
    ts = [T0 + 5, T0 + 9, T0 + 1, T0 + 7, T0 + 3]
    hdrs = [[("h", b"%d" % i)] for i in range(5)]
    buf = build_batch(vals, keys, ts, hdrs, base_offset=100, compression=codec, producer_id=7, producer_epoch=3,
                      base_sequence=40)
    m = OffsetMap(1 << 16)
    m.add_batches(buf)
    out, pos, kept, removed = filter_batches(buf, 0, m, T0, DRM)
    assert (pos, kept, removed) == (len(buf), 3, 2)
    (b,) = list(iter_batches(out))
    b.validate()
    assert (b.base_offset, b.last_offset_delta, b.record_count) == (100, 4, 3)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.compression) == (7, 3, 40,
                                                                                 RecordBatch(buf).compression)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in b] == [
        (102, b"a", b"3", T0 + 1, [("h", b"2")]), (103, b"c", None, T0 + 7, [("h", b"3")]),
        (104, b"b", b"5", T0 + 3, [("h", b"4")])]
    assert b.max_timestamp == T0 + 7  # from the kept records
    # the kept tombstone stamped the batch with a delete horizon (KIP-534): attributes bit 6, BaseTimestamp
    assert b.attributes & 0x40 and b.base_timestamp == T0 + DRM
    # a later cleaning before the horizon keeps it, byte for byte; one at the horizon removes it
    assert filter_batches(out, 0, m, T0 + DRM - 1, DRM)[0] == out
    again, _, kept, removed = filter_batches(out, 0, m, T0 + DRM, DRM)
    (b2,) = list(iter_batches(again))
    b2.validate()
    assert [(r.offset, r.value, r.timestamp) for r in b2] == [(102, b"3", T0 + 1), (104, b"5", T0 + 3)]
    assert (kept, removed) == (2, 1) and b2.base_timestamp == T0 + DRM and b2.max_timestamp == T0 + 3
    # a batch losing every record goes, or stays empty when it is its producer's last (Kafka's writeEmptyHeader:
    # codec none, no delete horizon, BaseTimestamp = MaxTimestamp = the batch's MaxTimestamp)
    m.put(b"a", 500), m.put(b"b", 500), m.put(b"c", 500)
    assert filter_batches(buf, 0, m, T0, DRM)[0] == b""
    out, _, kept, removed = filter_batches(buf, 0, m, T0, DRM, {104})
    (b,) = list(iter_batches(out))
    b.validate()
    assert (b.base_offset, b.last_offset_delta, b.record_count, b.next_offset, b.producer_id,
            b.base_sequence, b.compression) == (100, 4, 0, 105, 7, 40, 0)
    assert (b.base_timestamp, b.max_timestamp) == (T0 + 9, T0 + 9) and not b.attributes & 0x40  # the batch's max
    assert list(b) == [] and len(out) == 61
    # the stamped batch (delete horizon in BaseTimestamp) emptied later loses the horizon with its records
    (e,) = list(iter_batches(filter_batches(again, 0, m, T0, DRM, {104})[0]))
    e.validate()
    assert (e.record_count, e.base_timestamp, e.max_timestamp, e.attributes & 0x40) == (0, T0 + 3, T0 + 3, 0)


def test_filter_batches_copies_untouched_batches_byte_for_byte_and_drops_keyless_records():
    a = build_batch([b"1", b"2"], [b"x", b"y"], base_offset=0, compression="lz4")
    b = build_batch([b"3", b"4"], [None, b"z"], base_offset=2)
    m = OffsetMap(1 << 16)
    m.add_batches(a + b)
    out, pos, kept, removed = filter_batches(a + b, 0, m, T0, DRM)
    assert out[:len(a)] == a  # every record kept: the batch as it was, compressed bytes included
    assert [(r.offset, r.key) for x in iter_batches(out) for r in x] == [(0, b"x"), (1, b"y"), (3, b"z")]
    assert (kept, removed) == (3, 1)


def test_filter_batches_stops_at_the_output_limit_on_a_batch_boundary():
    buf = b"".join(build_batch([b"v" * 100] * 10, [b"k%d" % (10 * i + j) for j in range(10)], base_offset=10 * i)
                   for i in range(20))
    m = OffsetMap(1 << 16)
    m.add_batches(buf)
    pos, parts = 0, []
    while pos < len(buf):
        out, pos, _, _ = filter_batches(buf, pos, m, T0, DRM, (), 3000)
        assert 0 < len(out) <= 3000 + 1300
        parts.append(out)
    assert b"".join(parts) == buf


# ------------------------------------------------------------------------------------------------ the cleaner

def _store(path, mode="exclusive", **cfg):
    base = {"file.delete.delay.ms": 0}
    base.update(cfg)
    return kafkalog.LogStore(path, base, exclusive=mode == "exclusive", read_only=mode == "read",
                             maintenance=False)


TOPIC_CFG = {"cleanup.policy": "compact", "segment.bytes": 1200, "index.interval.bytes": 150,
             "delete.retention.ms": DRM, "min.cleanable.dirty.ratio": "0.5", "retention.ms": -1}


class Model:
    def __init__(self):
        self.recs = []  # (offset, key, value, ts)
        self.lso = 0
        self.cleaned_end = 0
        self.cleans = []  # (records appended before it, its now) of every cleaning round that ran

    def may_be_gone(self, tombstone) -> bool:
        """KIP-534: a cleaning that keeps the tombstone stamps now + delete.retention.ms into its batch; a later
        cleaning at or past that time removes it."""
        nows = [now for seen, now in self.cleans if seen > tombstone[0]]
        return any(b - a >= DRM for i, a in enumerate(nows) for b in nows[i + 1:])

    def latest(self):
        out = {}
        for r in self.recs:
            out[r[1]] = r
        return out


def _check(log, m: Model, active_base: int):
    got = [(r.offset, r.key, r.value, r.timestamp) for r in log.records()]
    by_offset = {r[0]: r for r in m.recs}
    offs = [g[0] for g in got]
    assert offs == sorted(set(offs)), "offsets must strictly increase"
    for g in got:
        assert by_offset.get(g[0]) == g, f"offset {g[0]} holds {g}, appended {by_offset.get(g[0])}"
        assert g[0] >= m.lso
    present = set(offs)
    for key, r in m.latest().items():
        if r[0] < m.lso:
            continue
        if r[2] is None and r[0] not in present:
            assert m.may_be_gone(r), f"tombstone {r} gone too early"
        else:
            assert r[0] in present, f"the latest record of {key!r}, {r}, is missing"
    # the active segment and everything above the cleaned end (but below the active) that was not superseded
    for r in m.recs:
        if r[0] >= max(active_base, m.lso):
            assert r[0] in present, f"{r} in the active segment is gone"
    # below the cleaned end, at most one record per key: the latest there
    below = {}
    for r in m.recs:
        if m.lso <= r[0] < m.cleaned_end:
            below[r[1]] = r[0]
    for o in offs:
        if o < m.cleaned_end:
            assert below[by_offset[o][1]] == o, f"superseded record {by_offset[o]} survived the cleaning"
    assert (log.log_start_offset, log.log_end_offset) == (m.lso, len(m.recs))
    return got


def _seek_checks(log, got, probes):
    offs = [g[0] for g in got]
    for p in probes:
        o = log.log_start_offset + p % max(1, log.log_end_offset - log.log_start_offset + 1)
        nxt = [x for x in offs if x >= o]
        first = next(iter(log.records(o)), None)
        assert (first.offset if first else None) == (nxt[0] if nxt else None), f"read from {o}"
    for target in (got[len(got) // 2][3],) if got else ():
        want = next(g for g in got if g[3] >= target)
        found = log.offset_for_time(target)
        assert (found.offset, found.timestamp) == (want[0], want[3])


op = st.one_of(
    st.tuples(st.just("batch"), st.integers(1, 12), st.integers(0, 40), st.sampled_from(["none", "lz4", "zstd"]),
              st.floats(0, 0.3)),
    st.tuples(st.just("one"), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.integers(0, 3000)),
    st.tuples(st.just("delete"), st.floats(0, 0.5)),
    st.tuples(st.just("reopen"), st.sampled_from(["exclusive", "shared"])),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=3, max_size=30), nkeys=st.integers(1, 12), seed=st.integers(0, 2**16),
       probes=st.lists(st.integers(0, 10_000), min_size=2, max_size=5))
def test_cleaner_matches_the_model(tmp_path_factory, ops, nkeys, seed, probes):
    path = tmp_path_factory.mktemp("compact")
    rng = random.Random(seed)
    store = _store(path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"cleanup.policy": "compact,delete"}))
    log = store.log("t", 0)
    m = Model()
    clock = 0
    ops = list(ops) + [("roll",), ("clean", 0)]
    try:
        for o in ops:
            kind = o[0]
            if kind == "batch":
                _, n, step, codec, tomb = o
                keys, vals, tss = [], [], []
                for _ in range(n):
                    clock += step
                    k = b"k%d" % rng.randrange(nkeys)
                    keys.append(k)
                    tag = b"v%d-%d" % (len(m.recs) + len(vals), rng.randrange(10**6))
                    vals.append(None if rng.random() < tomb else tag)
                    tss.append(T0 + clock)
                base = log.append_batch(vals, keys, tss, compression=codec)
                assert base == len(m.recs)
                m.recs += [(base + i, keys[i], vals[i], tss[i]) for i in range(n)]
            elif kind == "one":
                clock += o[1]
                k = b"k%d" % rng.randrange(nkeys)
                v = None if o[2] and rng.random() < 0.3 else b"one-%d" % len(m.recs)
                assert log.append(v, key=k, timestamp=T0 + clock) == len(m.recs)
                m.recs.append((len(m.recs), k, v, T0 + clock))
            elif kind == "roll":
                log.roll()
            elif kind == "clean":
                now = T0 + clock + o[1]
                stats = log.run_cleaner(now_ms=now, force=True)
                if stats is not None:
                    assert not stats.aborted
                    m.cleaned_end = max(m.cleaned_end, stats.end_offset)
                    m.cleans.append((len(m.recs), now))
            elif kind == "delete":
                target = m.lso + int(o[1] * (len(m.recs) - m.lso))
                log.delete_records_before(target)
                m.lso = max(m.lso, target)
            elif kind == "reopen":
                store.close()
                store = _store(path, o[1])
                log = store.log("t", 0)
            active = log.segments()[-1].base_offset
            got = _check(log, m, active)
        _seek_checks(log, got, probes)
        store.close()
        for mode in ("read", "shared", "exclusive"):
            store = _store(path, mode)
            log = store.log("t", 0)
            assert _check(log, m, active) == got
            assert log.read_columns()["offset"].tolist() == [g[0] for g in got]
            store.close()
    finally:
        store.close()


def _fill(log, n, nkeys, start_ts=T0, step=1, tomb=0.0, rng=None) -> dict:
    """Append n keyed records; returns key -> (offset, value) of the latest."""
    rng = rng or random.Random(1)
    latest = {}
    for i in range(n):
        k = b"k%d" % rng.randrange(nkeys)
        v = None if rng.random() < tomb else b"value-%d" % i
        latest[k] = (log.append(v, key=k, timestamp=start_ts + i * step), v)
    return latest


def test_a_dirty_ratio_below_the_minimum_waits_and_max_compaction_lag_forces_it(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"min.cleanable.dirty.ratio": "0.9",
                                                  "max.compaction.lag.ms": 60_000}))
    log = store.log("t", 0)
    _fill(log, 300, 5)
    log.roll()
    assert log.run_cleaner(now_ms=T0 + 1000).end_offset == 300  # all dirty: ratio 1.0 >= 0.9
    _fill(log, 30, 5, start_ts=T0 + 2000)
    log.roll()
    # dirty 30 records against 5 clean ones: ratio ~0.85 < 0.9
    assert log.run_cleaner(now_ms=T0 + 3000) is None
    assert log.run_cleaner(now_ms=T0 + 2000 + 59_000) is None
    # the first dirty batch (its largest timestamp, as Kafka's firstBatchTimestamp) is older than max.compaction.lag.ms
    stats = log.run_cleaner(now_ms=T0 + 2000 + 29 + 60_001)
    assert stats is not None and stats.end_offset == 330
    store.close()


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"min.compaction.lag.ms": 10_000}))
    log = store.log("t", 0)
    _fill(log, 200, 3, start_ts=T0, step=100)  # timestamps T0 .. T0 + 19.9 s over several segments
    log.roll()
    segs = log.segments()
    stats = log.run_cleaner(now_ms=T0 + 20_000, force=True)
    # the first segment with a record newer than now - 10 s is the first uncleanable one
    first_young = next(s for s in segs[:-1] if T0 + 20_000 - s.largest_timestamp < 10_000)
    assert stats.end_offset == first_young.base_offset
    assert sum(1 for _ in log.records(first_young.base_offset)) == 200 - first_young.base_offset
    store.close()


def test_the_active_segment_is_never_cleaned(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"segment.bytes": 1 << 20}))
    log = store.log("t", 0)
    latest = _fill(log, 100, 2)
    assert log.run_cleaner(force=True) is None  # one segment: the active one
    assert sum(1 for _ in log.records()) == 100
    log.roll()
    assert log.run_cleaner(force=True).records_removed == 98
    assert [(r.offset, r.value) for r in log.records()] == sorted(latest.values())
    store.close()


def test_cleaning_twice_merges_small_cleaned_segments_and_changes_nothing_else(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG))
    log = store.log("t", 0)
    latest = _fill(log, 2000, 10)
    log.roll()
    before = len(log.segments())
    assert before > 10
    log.run_cleaner(force=True)
    first = [(r.offset, r.key, r.value) for r in log.records()]
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == first
    assert len(log.segments()) == before  # the first round cleans each full segment alone
    log.append(b"new", key=b"k0")
    log.roll()
    log.run_cleaner(force=True)
    assert len(log.segments()) <= 3  # the small cleaned segments were grouped into one
    assert [(r.offset, r.key, r.value) for r in log.records()] == [x for x in first if x[1] != b"k0"] + [
        (2000, b"k0", b"new")]
    store.close()


def test_tombstones_expire_after_delete_retention_ms(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"delete.retention.ms": 5000}))
    log = store.log("t", 0)
    log.append(b"a1", key=b"a", timestamp=T0)
    log.append(b"b1", key=b"b", timestamp=T0)
    log.append(None, key=b"a", timestamp=T0 + 10)
    log.roll()
    # old record time does not matter: the first cleaning keeps the tombstone and stamps now + 5 s into its batch
    log.run_cleaner(now_ms=T0 + 10**9, force=True)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in log.records()] == [
        (1, b"b", b"b1", T0), (2, b"a", None, T0 + 10)]
    for now, left in ((T0 + 10**9 + 4999, 2), (T0 + 10**9 + 5000, 1)):
        log.append(b"x", key=b"x", timestamp=T0 + 100)  # something dirty again
        log.roll()
        log.run_cleaner(now_ms=now, force=True)
        assert [r.key for r in log.records()][:left] == [b"b", b"a"][:left]
    assert [(r.offset, r.key, r.value) for r in log.records()] == [(1, b"b", b"b1"), (4, b"x", b"x")]
    store.close()


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"segment.bytes": 1 << 20}))
    log = store.log("t", 0)
    log.append_records(build_batch([b"1", b"2"], [b"a", b"b"], producer_id=42, producer_epoch=1, base_sequence=0))
    log.append_records(build_batch([b"3", b"4"], [b"a", b"b"]))
    log.roll()
    log.append(b"5", key=b"c")
    stats = log.run_cleaner(force=True)
    assert stats.records_removed == 2
    batches = [b for s in log.segments() for _, b in s.batch_positions()]
    assert [(b.base_offset, b.next_offset, b.record_count, b.producer_id, b.base_sequence) for b in batches] == [
        (0, 2, 0, 42, 0), (2, 4, 2, -1, -1), (4, 5, 1, -1, -1)]
    store.close()


def test_only_a_producers_last_batch_stays_empty_and_reads_go_past_it(tmp_path):
    """Kafka keeps an emptied batch only when it is its producer's last (idempotence state), never a cleaned
    group's last batch: segments whose records all went are empty, not a lone header. A segment left holding only an
    empty batch is read through: every read at its offsets also returns the next segment's first records (a Fetch
    answer of headers alone makes librdkafka report MSG_SIZE_TOO_LARGE, issue 21)."""
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"segment.bytes": 100}))  # one batch a segment and a group
    log = store.log("t", 0)
    log.append_records(build_batch([b"1", b"2"], [b"a", b"b"], [T0, T0 + 5]))               # 0-1, no producer
    log.roll()
    log.append_records(build_batch([b"3", b"4"], [b"a", b"b"], [T0 + 6, T0 + 9], producer_id=42,
                                   producer_epoch=1, base_sequence=0))                      # 2-3, pid 42's last
    log.roll()
    log.append_records(build_batch([b"5", b"6"], [b"a", b"b"], [T0 + 10, T0 + 11]))         # 4-5, supersedes
    log.roll()
    log.append(b"7", key=b"c", timestamp=T0 + 20)                                             # 6, the active one
    stats = log.run_cleaner(force=True)
    assert stats.records_removed == 4
    segs = log.segments()
    assert [(s.base_offset, s.size) for s in segs][:2] == [(0, 0), (2, 61)], [(s.base_offset, s.size) for s in segs]
    batches = [b for s in segs for _, b in s.batch_positions()]
    assert [(b.base_offset, b.next_offset, b.record_count, b.producer_id, b.max_timestamp, b.base_timestamp)
            for b in batches] == [(2, 4, 0, 42, T0 + 9, T0 + 9), (4, 6, 2, -1, T0 + 11, T0 + 10),
                                  (6, 7, 1, -1, T0 + 20, T0 + 20)]
    assert [(r.offset, r.value) for r in log.records()] == [(4, b"5"), (5, b"6"), (6, b"7")]
    for off in (0, 1, 2, 3):
        got = list(iter_batches(log.read(off, 1)))   # one byte: still the empty header and a batch with records
        assert [b.base_offset for b in got] == [2, 4] and got[-1].record_count == 2, off
        assert log.fetch(off, 1 << 20)[2] is not None
    assert [b.base_offset for b in iter_batches(log.read(4, 1))] == [4]
    assert log.offset_for_time(T0).offset == 4   # no timestamp search lands on the empty batch
    store.close()
    with _store(tmp_path, "read") as st:  # another view, from the files alone
        assert [r.offset for r in st.log("t", 0).records()] == [4, 5, 6]
        assert [b.base_offset for b in iter_batches(st.log("t", 0).read(0, 1))] == [2, 4]


@pytest.mark.parametrize("max_bytes", [1, 100, 1 << 20])
def test_a_read_past_an_empty_batch_takes_the_next_batch_of_its_own_segment(tmp_path, max_bytes):
    """The empty batch is followed by batches with records in the same segment: a read at its offsets answers it
    and then exactly those batches in offset order (one byte: the next one alone), never a later segment's."""
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"segment.bytes": 1 << 20}))
    log = store.log("t", 0)
    log.append_records(build_batch([b"1", b"2"], [b"a", b"b"], producer_id=42, producer_epoch=1,
                                   base_sequence=0))                                        # 0-1, pid 42's last
    log.append_records(build_batch([b"3"], [b"c"]))                                         # 2
    log.append_records(build_batch([b"4"], [b"d"]))                                         # 3
    log.append_records(build_batch([b"5", b"6"], [b"a", b"b"]))                             # 4-5, supersedes
    log.roll()
    log.append(b"7", key=b"e")                                                               # 6, the active one
    log.run_cleaner(force=True)
    assert [(b.base_offset, b.record_count) for s in log.segments() for _, b in s.batch_positions()] == [
        (0, 0), (2, 1), (3, 1), (4, 2), (6, 1)]
    got = [(b.base_offset, b.record_count) for b in iter_batches(log.read(0, max_bytes))]
    want = {1: 2, 100: 2, 1 << 20: 4}[max_bytes]  # at least the empty one and the next; whole batches to the limit
    assert got == [(0, 0), (2, 1), (3, 1), (4, 2)][:want], got
    assert [r.offset for r in log.records()] == [2, 3, 4, 5, 6]
    store.close()


def test_keyless_records_written_before_the_topic_became_compacted_are_removed(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, {"segment.bytes": 1 << 20, "file.delete.delay.ms": 0})
    log = store.log("t", 0)
    log.append(b"no key")
    log.append(b"keyed", key=b"k")
    store.alter_topic_config("t", dict(TOPIC_CFG, **{"segment.bytes": 1 << 20}))
    log = store.log("t", 0)
    with pytest.raises(InvalidRecordError):
        log.append(b"no key again")
    log.roll()
    log.append(b"next", key=b"n")
    log.run_cleaner(force=True)
    assert [(r.offset, r.value) for r in log.records()] == [(1, b"keyed"), (2, b"next")]
    store.close()


def test_a_delete_before_during_the_copy_aborts_the_swap_and_loses_nothing(tmp_path, monkeypatch):
    from kafkalog.storage import failpoints
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"cleanup.policy": "compact,delete"}))
    log = store.log("t", 0)
    _fill(log, 600, 4)
    log.roll()
    first_next = log.segments()[1].base_offset
    fired = []

    def delete_meanwhile():
        if not fired:
            fired.append(1)
            log.delete_records_before(first_next + 1)  # removes the first segment under the copy
    failpoints.enable("clean:after-cleaned", delete_meanwhile)
    try:
        stats = log.run_cleaner(force=True)
    finally:
        failpoints.disable()
    assert stats.aborted and stats.groups == 0
    assert not [p for p in tmp_path.joinpath("t-0").iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert log.log_start_offset == first_next + 1
    assert [r.offset for r in log.records()] == list(range(first_next + 1, 600))
    assert log.run_cleaner(force=True).groups >= 1  # the next round goes on from there
    store.close()


def test_other_processes_views_see_the_cleaned_log(tmp_path):
    writer = _store(tmp_path, "shared")
    writer.create_topic("t", 1, dict(TOPIC_CFG))
    wlog = writer.log("t", 0)
    _fill(wlog, 500, 3)
    wlog.roll()
    reader = _store(tmp_path, "read")
    rlog = reader.log("t", 0)
    assert len(list(rlog.records())) == 500
    other = _store(tmp_path, "shared")
    olog = other.log("t", 0)
    wlog.run_cleaner(force=True)
    assert len(list(rlog.records())) == 3  # the read-only view listed again (the clean generation changed)
    assert [r.offset for r in olog.records()] == [r.offset for r in rlog.records()]
    olog.append(b"after", key=b"k0")
    assert [r.value for r in rlog.records()][-1] == b"after"
    for s in (reader, other, writer):
        s.close()


def test_kafkalog_check_passes_on_a_cleaned_data_dir(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG))
    log = store.log("t", 0)
    _fill(log, 1000, 7, tomb=0.2)
    log.roll()
    log.run_cleaner(force=True, now_ms=T0 + 10**9)
    store.close()
    out = subprocess.run([sys.executable, "-m", "kafkalog", "check", str(tmp_path)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_embedded_consumer_reads_across_holes_and_seeks_into_them(tmp_path):
    from kafkalog import KafkaConsumer, TopicPartition
    store = _store(tmp_path, "shared")
    store.create_topic("p", 1, dict(TOPIC_CFG, **{"segment.bytes": 2000}))
    log = store.log("p", 0)
    latest = _fill(log, 1000, 7)
    log.roll()
    assert log.run_cleaner(force=True).records_removed == 993
    c = KafkaConsumer("p", store=store, group_id="g", auto_offset_reset="earliest", max_poll_records=3)
    try:
        got = []
        for _ in range(30):
            for recs in c.poll(timeout_ms=100).values():
                got += [(r.offset, r.value) for r in recs]
            if len(got) >= 7:
                break
        assert got == sorted(latest.values())
        tp = TopicPartition("p", 0)
        hole = next(o for o in range(1000) if o not in {x[0] for x in got})
        c.seek(tp, hole)
        first = next(r for _ in range(10) for recs in c.poll(timeout_ms=100).values() for r in recs)
        assert first.offset == min(o for o, _ in got if o >= hole)
    finally:
        c.close()
        store.close()


def test_consumer_offsets_is_left_to_its_snapshots(tmp_path):
    # its cleanup.policy is compact,delete as Kafka's, but a tombstone expired above a snapshot would resurrect
    # the offset it deleted: the cleaner never runs on it
    from kafkalog import KafkaConsumer, TopicPartition
    store = _store(tmp_path, "shared")
    store.create_topic("t", 1)
    store.log("t", 0).append(b"x")
    c = KafkaConsumer(store=store, group_id="g")
    c.assign([TopicPartition("t", 0)])
    for i in range(3):
        c.seek(TopicPartition("t", 0), i)
        c.commit()
    c.close()
    offsets_log = store.log("__consumer_offsets", 0)
    assert offsets_log.config["cleanup.policy"] == "compact,delete"
    offsets_log.roll()
    assert offsets_log.run_cleaner(force=True) is None
    store.close()


@pytest.mark.parametrize("override,cleans", [({}, True), ({"log.cleaner.enable": False}, False),
                                             ({"log.cleaner.threads": 0}, False)])
def test_the_store_runs_the_cleaner_by_its_keys(tmp_path, override, cleans):
    store = _store(tmp_path, "exclusive", **override)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 1200})
    log = store.log("t", 0)
    _fill(log, 300, 3)
    log.append(b"x", key=b"k0")  # the active segment: its record supersedes k0's in the dirty section
    log.roll()
    log.append(b"y", key=b"k1")  # ... and this one the whole clean section's k1 (dirty ratio stays 1 before)
    counts = store.run_maintenance()
    assert (counts["segments_cleaned"] > 0) == cleans
    assert (sum(1 for _ in log.records()) < 302) == cleans
    store.close()


def test_kafkas_broker_names_of_the_compaction_keys_set_the_topic_defaults():
    from kafkalog.config import Config
    c = Config({"log.cleaner.min.cleanable.ratio": "0.25", "log.cleaner.delete.retention.ms": 7,
                "log.cleaner.min.compaction.lag.ms": 8, "log.cleaner.max.compaction.lag.ms": 9,
                "log.cleaner.dedupe.buffer.size": 4096, "log.cleaner.backoff.ms": 10})
    assert (c["min.cleanable.dirty.ratio"], c["delete.retention.ms"], c["min.compaction.lag.ms"],
            c["max.compaction.lag.ms"], c["log.cleaner.dedupe.buffer.size"], c["log.cleaner.backoff.ms"]) == (
        "0.25", 7, 8, 9, 4096, 10)


def test_a_round_stopped_by_close_swaps_nothing_and_leaves_no_files(tmp_path):
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG))
    log = store.log("t", 0)
    _fill(log, 500, 3)
    log.roll()
    stats = log.run_cleaner(force=True, should_stop=lambda: True)
    assert stats.aborted.startswith("stopped") and stats.groups == 0
    assert sum(1 for _ in log.records()) == 500
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert log.run_cleaner(force=True).groups > 0
    store.close()


def _txn(values, keys, pid, epoch=0, seq=0):
    return build_batch(values, keys, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def _committed(log):
    return {bytes(r.key): bytes(r.value) for r in log.records(isolation_level="read_committed")}


def test_compaction_of_a_transactional_topic_keeps_committed_values_markers_and_open_transactions(tmp_path):
    """Kafka's cleaner with transactions: an aborted transaction's records are neither the latest value of their key
    nor kept; a segment at or past the last stable offset (an open transaction's records) is not cleaned; markers
    stay. Breakage check: mapping aborted records removes the committed value 'a' (the first assertion fails)."""
    store = _store(tmp_path)
    store.create_topic("t", 1, dict(TOPIC_CFG, **{"segment.bytes": 1 << 20}))
    log = store.log("t", 0)
    log.append_records(_txn([b"a1", b"b1"], [b"a", b"b"], 7))
    log.append_marker(7, 0, True)
    log.append_records(_txn([b"a2"], [b"a"], 7, seq=2))  # aborted: must not replace a1
    log.append_marker(7, 0, False)
    log.append_records(build_batch([b"c1"], [b"c"]))
    log.roll()
    log.append_records(_txn([b"b2"], [b"b"], 8))  # open across a roll: its segment is not cleaned
    log.roll()
    log.append_records(build_batch([b"d1"], [b"d"]))
    log.roll()
    log.append(b"e", key=b"e")
    before = _committed(log)
    assert before == {b"a": b"a1", b"b": b"b1", b"c": b"c1"}  # read_committed stops at producer 8's first offset
    stats = log.run_cleaner(force=True)
    assert stats is not None and stats.end_offset == 6  # the segment of producer 8's open transaction starts there
    assert _committed(log) == before
    batches = [b for s in log.segments() for _, b in s.batch_positions()]
    assert [(b.base_offset, b.is_control) for b in batches if b.is_control] == [(2, True), (4, True)]
    assert 3 not in [b.base_offset for b in batches]  # the aborted record went
    assert log.last_stable_offset == 6
    log.append_marker(8, 0, True)  # producer 8 commits: b2 replaces b1
    log.roll()
    log.append(b"f", key=b"f")
    log.run_cleaner(force=True)
    after = {**before, b"b": b"b2", b"d": b"d1", b"e": b"e", b"f": b"f"}
    assert _committed(log) == after
    store.close()
    # reopened: the state derived from what the cleaner left agrees
    store = _store(tmp_path)
    log = store.log("t", 0)
    assert _committed(log) == after and log.last_stable_offset == log.log_end_offset
    store.close()
