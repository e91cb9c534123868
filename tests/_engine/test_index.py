"""kafkalog._engine.index: Kafka's OffsetIndexTest / TimeIndexTest ported, the zero-padded file of KAFKA-10207,
refresh() across objects and processes, and a hypothesis model test (bisect over a sorted list is the oracle)."""

import bisect
import multiprocessing
import os
import random
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkalog._engine.index import (
    DEFAULT_MAX_INDEX_SIZE,
    OFFSET_INDEX_DTYPE,
    TIME_INDEX_DTYPE,
    AbstractIndex,
    OffsetIndex,
    TimeIndex,
)
from kafkalog.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidConfigError,
    InvalidOffsetError,
    InvalidTimestampError,
    KafkaStorageError,
    LogClosedError,
)

BASE = 45  # Kafka's OffsetIndexTest / TimeIndexTest base offset
MAX_ENTRIES = 30
INT32_MAX = 2**31 - 1
WARM_OFFSET_ENTRIES = 8192 // 8  # the warm section of the two-section search
WARM_TIME_ENTRIES = 8192 // 12


def offset_path(directory: Path, base: int = BASE) -> Path:
    return directory / f"{base:020d}.index"


def time_path(directory: Path, base: int = BASE) -> Path:
    return directory / f"{base:020d}.timeindex"


def offset_bytes(entries) -> bytes:
    """RelativeOffset => Int32 | Position => Int32, big-endian."""
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def time_bytes(entries) -> bytes:
    """Timestamp => Int64 | RelativeOffset => Int32, big-endian."""
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


@pytest.fixture
def idx(tmp_path):
    index = OffsetIndex(offset_path(tmp_path), BASE, MAX_ENTRIES * 8)
    yield index
    index.close()


@pytest.fixture
def tidx(tmp_path):
    index = TimeIndex(time_path(tmp_path), BASE, MAX_ENTRIES * 12)
    yield index
    index.close()


def append_time_entries(index: TimeIndex, n: int) -> None:
    """TimeIndexTest.appendEntries: (i * 10, i * 10 + base) for i in 1..n."""
    for i in range(1, n + 1):
        index.maybe_append(i * 10, i * 10 + BASE)


# --- byte format -------------------------------------------------------------------------------------------------


def test_offset_index_golden_bytes(tmp_path):
    path = offset_path(tmp_path, 100)
    with OffsetIndex(path, 100, 1024) as index:
        index.append(101, 4096)
        index.append(356, 0x01020304)
        index.flush()
        assert path.read_bytes()[:24] == bytes.fromhex("00000001 00001000 00000100 01020304 0000000000000000")
    assert path.read_bytes() == bytes.fromhex("00000001 00001000 00000100 01020304")


def test_time_index_golden_bytes(tmp_path):
    path = time_path(tmp_path, 100)
    with TimeIndex(path, 100, 1024) as index:
        index.maybe_append(0x0102030405060708, 105)
        index.maybe_append(0x0102030405060709, 0x7FFFFFFF + 100)
    assert path.read_bytes() == bytes.fromhex("0102030405060708 00000005 0102030405060709 7fffffff")


def test_to_numpy_structured_read_only_view(tmp_path):
    with OffsetIndex(offset_path(tmp_path), BASE, 1024) as index:
        assert index.to_numpy().dtype == OFFSET_INDEX_DTYPE and len(index.to_numpy()) == 0
        for i in range(1, 6):
            index.append(BASE + 2 * i, 100 * i)
        view = index.to_numpy()
        assert view.dtype == OFFSET_INDEX_DTYPE and view.dtype.itemsize == 8
        assert view["rel"].tolist() == [2, 4, 6, 8, 10]
        assert view["pos"].tolist() == [100, 200, 300, 400, 500]
        with pytest.raises(ValueError):
            view["pos"][0] = 1
    # the view keeps its mapping alive after close (close must not unmap memory a live view points into)
    assert view["rel"].tolist() == [2, 4, 6, 8, 10]
    with TimeIndex(time_path(tmp_path), BASE, 1024) as tindex:
        tindex.maybe_append(1_700_000_000_000, BASE + 3)
        tview = tindex.to_numpy()
        assert tview.dtype == TIME_INDEX_DTYPE and tview.dtype.itemsize == 12
        assert tview.tolist() == [(1_700_000_000_000, 3)]


def test_new_files_are_preallocated_to_whole_entries(tmp_path):
    with OffsetIndex(offset_path(tmp_path), BASE, 1001) as index, TimeIndex(time_path(tmp_path), BASE, 1001) as t:
        assert os.path.getsize(index.path) == 1000 and index.max_entries == 125 and index.entries == 0
        assert os.path.getsize(t.path) == 996 and t.max_entries == 83 and t.entries == 0


def test_default_size_is_kafkas(tmp_path):
    with OffsetIndex(offset_path(tmp_path, 0), 0) as index, TimeIndex(time_path(tmp_path, 0), 0) as t:
        assert DEFAULT_MAX_INDEX_SIZE == 10 * 1024 * 1024
        assert index.max_entries == 1_310_720 and os.path.getsize(index.path) == 10 * 1024 * 1024
        assert t.max_entries == 873_813 and os.path.getsize(t.path) == 10_485_756
    assert os.path.getsize(offset_path(tmp_path, 0)) == 0  # trimmed on close


# --- OffsetIndexTest ---------------------------------------------------------------------------------------------


def test_lookup_extreme_cases(idx):
    assert idx.lookup(BASE) == (BASE, 0), "lookup on an empty index"
    assert idx.lookup(BASE + 1000) == (BASE, 0)
    for i in range(idx.max_entries):
        idx.append(BASE + i + 1, i)
    assert idx.lookup(BASE) == (BASE, 0)
    assert idx.lookup(BASE - 1) == (BASE, 0)
    assert idx.lookup(BASE + idx.max_entries) == (BASE + idx.max_entries, idx.max_entries - 1)
    assert idx.lookup(BASE + 10**9) == (BASE + idx.max_entries, idx.max_entries - 1)


def test_random_lookups_agree_with_sorted_map_floor(idx):
    assert idx.lookup(92) == (BASE, 0), "a missing offset gives position 0"
    rnd = random.Random(42)
    offsets = sorted(rnd.sample(range(BASE + 1, BASE + 1 + 10 * MAX_ENTRIES), MAX_ENTRIES))
    positions = sorted(rnd.sample(range(1, 100_000), MAX_ENTRIES))
    for offset, position in zip(offsets, positions):
        idx.append(offset, position)
    for offset, position in zip(offsets, positions):
        assert idx.lookup(offset) == (offset, position)
    for target in [rnd.randrange(BASE - 5, offsets[-1] + 20) for _ in range(500)]:
        i = bisect.bisect_right(offsets, target) - 1
        expected = (offsets[i], positions[i]) if i >= 0 else (BASE, 0)
        assert idx.lookup(target) == expected, target


@pytest.mark.parametrize("n", [1, 2, WARM_OFFSET_ENTRIES, WARM_OFFSET_ENTRIES + 1, WARM_OFFSET_ENTRIES + 2, 5000])
def test_every_lookup_of_a_large_index_matches_searchsorted(tmp_path, n):
    # sizes around the warm section exercise both halves of the two-section search and the boundary between them
    rnd = np.random.default_rng(n)
    offsets = BASE + np.cumsum(rnd.integers(1, 4, n))
    positions = np.cumsum(rnd.integers(1, 500, n))
    with OffsetIndex(offset_path(tmp_path), BASE, (n + 10) * 8) as index:
        for offset, position in zip(offsets.tolist(), positions.tolist()):
            index.append(offset, position)
        targets = np.arange(BASE - 2, int(offsets[-1]) + 3)
        slots = np.searchsorted(offsets, targets, side="right") - 1
        for target, slot in zip(targets.tolist(), slots.tolist()):
            expected = (int(offsets[slot]), int(positions[slot])) if slot >= 0 else (BASE, 0)
            assert index.lookup(target) == expected, target
        for start in range(0, int(positions[-1]) + 3, 7):
            slot = int(np.searchsorted(positions, start, side="left"))
            expected = (int(offsets[slot]), int(positions[slot])) if slot < n else None
            assert index.fetch_upper_bound_offset(start, 0) == expected, start


def test_append_out_of_order(idx):
    idx.append(51, 0)
    with pytest.raises(InvalidOffsetError) as err:
        idx.append(50, 1)
    assert "50" in str(err.value) and "51" in str(err.value)
    with pytest.raises(InvalidOffsetError):
        idx.append(51, 1)
    assert idx.entries == 1 and idx.last_offset == 51


def test_first_append_below_base_offset(idx):
    with pytest.raises(InvalidOffsetError) as err:
        idx.append(BASE - 1, 0)
    assert str(BASE - 1) in str(err.value) and str(BASE) in str(err.value)
    idx.append(BASE, 0)  # the base offset itself is a valid first key
    assert idx.entries == 1


def test_append_positions_must_not_go_back_nor_overflow(idx):
    idx.append(BASE + 1, 100)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 2, 99)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 2, INT32_MAX + 1)
    idx.append(BASE + 2, 100)
    idx.append(BASE + 3, INT32_MAX)
    assert idx.entries == 3


def test_append_too_many(idx):
    for i in range(idx.max_entries):
        idx.append(BASE + i + 1, i)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(BASE + idx.max_entries + 1, idx.max_entries)


def test_relative_offset_overflow(idx):
    with pytest.raises(InvalidOffsetError, match="overflow"):
        idx.append(BASE + INT32_MAX + 1, 1)
    assert idx.entries == 0
    idx.append(BASE + INT32_MAX, 1)
    assert idx.lookup(BASE + INT32_MAX + 5) == (BASE + INT32_MAX, 1)


def test_truncate(tmp_path):
    with OffsetIndex(offset_path(tmp_path, 0), 0, 10 * 8) as index:
        index.truncate()
        for i in range(1, 10):
            index.append(i, i)
        index.truncate_to(12)
        assert index.lookup(10) == (9, 9), "truncate past the end changes nothing"
        assert index.last_offset == 9
        index.append(10, 10)
        index.truncate_to(10)
        assert index.lookup(10) == (9, 9), "truncate to an existing key removes it"
        assert index.last_offset == 9
        index.append(10, 10)
        index.truncate_to(9)
        assert index.lookup(10) == (8, 8)
        assert index.last_offset == 8
        index.append(9, 9)
        index.truncate_to(5)
        assert index.lookup(10) == (4, 4)
        assert index.last_offset == 4
        index.append(5, 5)
        index.truncate()
        assert index.entries == 0 and index.last_offset == 0 and index.last_entry == (0, 0)
        index.append(0, 0)
        assert index.entries == 1


def test_truncate_to_between_keys_keeps_the_floor(idx):
    for i in range(1, 11):
        idx.append(BASE + 2 * i, 10 * i)
    idx.truncate_to(BASE + 7)  # between 6 and 8
    assert idx.entries == 3 and idx.last_entry == (BASE + 6, 30)
    assert idx.lookup(BASE + 100) == (BASE + 6, 30)
    idx.truncate_to(BASE)  # below every key
    assert idx.entries == 0 and idx.last_entry == (BASE, 0)
    idx.append(BASE + 1, 5)
    assert idx.lookup(BASE + 3) == (BASE + 1, 5)


def test_truncated_slots_are_zeroed_on_disk(idx):
    for i in range(1, 11):
        idx.append(BASE + i, 10 * i)
    idx.truncate_to(BASE + 4)
    raw = idx.path.read_bytes()
    assert raw[:24] == offset_bytes([(1, 10), (2, 20), (3, 30)])
    assert raw[24:80] == bytes(56)


def test_reopen_preserves_entries_and_trims(tmp_path):
    path = offset_path(tmp_path)
    index = OffsetIndex(path, BASE, MAX_ENTRIES * 8)
    index.append(51, 0)
    index.append(52, 1)
    index.close()
    assert os.path.getsize(path) == 2 * 8, "close trims the file to entries * 8"
    with OffsetIndex(path, BASE, MAX_ENTRIES * 8) as reopened:
        assert reopened.lookup(51) == (51, 0)
        assert reopened.lookup(52) == (52, 1)
        assert reopened.last_offset == 52 and reopened.entries == 2
        assert reopened.max_entries == 2 and reopened.is_full()  # an existing file is not re-expanded
        with pytest.raises(IndexFullError):
            reopened.append(53, 2)
    with OffsetIndex(path, BASE, writable=False) as read_only:
        assert read_only.entries == 2 and read_only.last_entry == (52, 1)


def test_read_only_index_never_changes_the_file(tmp_path):
    path = offset_path(tmp_path)
    path.write_bytes(offset_bytes([(6, 0), (7, 1)]) + bytes(8 * 5) + b"\x01\x02\x03")  # padding + a torn tail
    before = path.read_bytes()
    with OffsetIndex(path, BASE, MAX_ENTRIES * 8, writable=False) as index:
        assert index.entries == 2 and index.lookup(60) == (52, 1)
        with pytest.raises(ValueError, match="read-only") as err:
            index.append(53, 2)
        assert not isinstance(err.value, OSError), "a caller's bug must not look like a storage failure"
        with pytest.raises(ValueError, match="read-only"):
            index.truncate_to(50)
        with pytest.raises(ValueError, match="read-only"):
            index.truncate()
        with pytest.raises(ValueError, match="read-only"):
            index.resize(8 * 100)
        with pytest.raises(ValueError, match="read-only"):
            index.trim_to_valid_size()
        index.flush()
    assert path.read_bytes() == before
    tpath = time_path(tmp_path)
    tpath.write_bytes(time_bytes([(10, 1)]))
    with TimeIndex(tpath, BASE, writable=False) as tindex:
        with pytest.raises(ValueError, match="read-only"):
            tindex.maybe_append(20, BASE + 2)
        assert tindex.entries == 1
    assert tpath.read_bytes() == time_bytes([(10, 1)])


def test_fetch_upper_bound_offset(idx):
    first, second, third, fourth = (BASE, 0), (BASE + 1, 10), (BASE + 2, 23), (BASE + 3, 37)
    assert idx.fetch_upper_bound_offset(first[1], 5) is None
    for offset, position in (first, second, third, fourth):
        idx.append(offset, position)
    assert idx.fetch_upper_bound_offset(first[1], 5) == second
    assert idx.fetch_upper_bound_offset(first[1], 10) == second
    assert idx.fetch_upper_bound_offset(first[1], 23) == third
    assert idx.fetch_upper_bound_offset(first[1], 22) == third
    assert idx.fetch_upper_bound_offset(second[1], 24) == fourth
    assert idx.fetch_upper_bound_offset(fourth[1], 1) is None
    assert idx.fetch_upper_bound_offset(first[1], INT32_MAX) is None
    assert idx.fetch_upper_bound_offset(second[1], INT32_MAX) is None


def test_entry_accessor(idx):
    with pytest.raises(IndexError):
        idx.entry(0)
    idx.append(BASE + 3, 30)
    idx.append(BASE + 5, 50)
    assert idx.entry(0) == (BASE + 3, 30) and idx.entry(1) == (BASE + 5, 50)
    with pytest.raises(IndexError):
        idx.entry(2)
    with pytest.raises(IndexError):
        idx.entry(-1)


# --- TimeIndexTest -----------------------------------------------------------------------------------------------


def test_time_lookup(tidx):
    assert tidx.lookup(100) == (-1, BASE), "empty time index"
    append_time_entries(tidx, MAX_ENTRIES - 1)
    assert tidx.lookup(9) == (-1, BASE), "below the first timestamp"
    assert tidx.lookup(25) == (20, 65), "between two entries"
    assert tidx.lookup(30) == (30, 75), "exact timestamp"
    assert tidx.lookup(10**12) == (290, 335)


def test_time_entry(tidx):
    with pytest.raises(IndexError):
        tidx.entry(0)
    append_time_entries(tidx, MAX_ENTRIES - 1)
    assert [tidx.entry(i) for i in range(4)] == [(10, 55), (20, 65), (30, 75), (40, 85)]
    assert tidx.last_entry == (290, 335)


def test_time_truncate(tidx):
    append_time_entries(tidx, MAX_ENTRIES - 1)
    tidx.truncate()
    assert tidx.entries == 0 and tidx.last_entry == (-1, BASE)
    append_time_entries(tidx, MAX_ENTRIES - 1)
    tidx.truncate_to(10 + BASE)
    assert tidx.entries == 0
    append_time_entries(tidx, 5)
    tidx.truncate_to(31 + BASE)  # keeps the entries whose offset is below 76: 55, 65, 75
    assert tidx.entries == 3 and tidx.last_entry == (30, 75)


def test_time_truncate_to_drops_every_entry_of_a_repeated_offset(tidx):
    tidx.maybe_append(10, BASE + 5)
    tidx.maybe_append(20, BASE + 7)
    tidx.maybe_append(30, BASE + 7)  # same offset, larger timestamp: allowed
    tidx.maybe_append(40, BASE + 9)
    tidx.truncate_to(BASE + 7)
    assert tidx.entries == 1 and tidx.last_entry == (10, BASE + 5)


def test_time_append_full_and_skip_full_check(tidx):
    append_time_entries(tidx, MAX_ENTRIES - 1)
    assert tidx.is_full() and tidx.entries == tidx.max_entries - 1
    with pytest.raises(IndexFullError):
        tidx.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        tidx.maybe_append(10000, (MAX_ENTRIES - 2) * 10, True)
    tidx.maybe_append(10000, 1000, True)
    assert tidx.entries == tidx.max_entries and tidx.last_entry == (10000, 1000)
    with pytest.raises(IndexFullError):
        tidx.maybe_append(10001, 1001, True)


def test_time_is_full_keeps_the_last_slot(tidx):
    append_time_entries(tidx, MAX_ENTRIES - 2)
    assert not tidx.is_full()
    tidx.maybe_append(10_000, 10_000)
    assert tidx.is_full()


def test_time_equal_timestamp_is_ignored(tidx):
    tidx.maybe_append(100, BASE + 1)
    tidx.maybe_append(100, BASE + 2)
    assert tidx.entries == 1 and tidx.last_entry == (100, BASE + 1)


def test_time_no_timestamp_is_never_written(tidx):
    tidx.maybe_append(-1, BASE)  # NO_TIMESTAMP (magic 0 batches): the time index stays empty
    assert tidx.entries == 0 and tidx.last_entry == (-1, BASE)


def test_time_smaller_offset_or_timestamp_is_an_error(tidx):
    tidx.maybe_append(100, BASE + 10)
    with pytest.raises(InvalidOffsetError) as err:
        tidx.maybe_append(200, BASE + 9)
    assert str(BASE + 9) in str(err.value) and str(BASE + 10) in str(err.value)
    with pytest.raises(InvalidTimestampError):
        tidx.maybe_append(99, BASE + 11)
    with pytest.raises(InvalidOffsetError):
        tidx.maybe_append(300, BASE + INT32_MAX + 1)
    assert tidx.entries == 1


# --- sanity checks -----------------------------------------------------------------------------------------------


def test_sanity_check_passes_on_healthy_indexes(idx, tidx):
    idx.sanity_check()
    tidx.sanity_check()
    for i in range(1, 6):
        idx.append(BASE + i, i * 100)
        tidx.maybe_append(i * 10, BASE + i)
    idx.sanity_check()
    tidx.sanity_check()


def test_offset_sanity_last_offset_below_base(tmp_path):
    path = offset_path(tmp_path)
    path.write_bytes(offset_bytes([(-5, 10), (-3, 20)]))  # ordered, so counted, but below the base offset
    with OffsetIndex(path, BASE) as index:
        assert index.entries == 2 and index.last_offset == BASE - 3
        with pytest.raises(CorruptIndexError, match=str(path)):
            index.sanity_check()


def test_offset_sanity_length_not_a_multiple_of_8(tmp_path):
    path = offset_path(tmp_path)
    path.write_bytes(offset_bytes([(1, 10), (2, 20), (3, 30)]) + b"\x00\x01\x02\x03\x04")
    with OffsetIndex(path, BASE, writable=False) as index:
        assert index.entries == 3
        with pytest.raises(CorruptIndexError, match="29 bytes"):
            index.sanity_check()
    with OffsetIndex(path, BASE) as index:  # a writable open cuts the torn entry
        index.sanity_check()
        assert index.length == 24
    assert os.path.getsize(path) == 24


def test_time_sanity_last_timestamp_below_first(tmp_path):
    path = time_path(tmp_path)
    n = WARM_TIME_ENTRIES + 20  # the bad first entry is outside the tail that open checks
    entries = [(10**15, 0)] + [(1000 + i, i) for i in range(1, n)]
    path.write_bytes(time_bytes(entries))
    with TimeIndex(path, BASE) as index:
        assert index.entries == n
        with pytest.raises(CorruptIndexError, match="last timestamp"):
            index.sanity_check()
    with TimeIndex(path, BASE, verify=True) as index:  # a full verification keeps the valid prefix only
        assert index.entries == 1
        index.sanity_check()


def test_time_sanity_last_offset_below_base(tmp_path):
    path = time_path(tmp_path)
    path.write_bytes(time_bytes([(10, -9), (20, -4)]))
    with TimeIndex(path, BASE) as index:
        assert index.entries == 2
        with pytest.raises(CorruptIndexError, match="last offset"):
            index.sanity_check()


def test_time_sanity_length_not_a_multiple_of_12(tmp_path):
    path = time_path(tmp_path)
    path.write_bytes(time_bytes([(10, 1), (20, 2)]) + b"\x07" * 7)
    with TimeIndex(path, BASE, writable=False) as index:
        with pytest.raises(CorruptIndexError, match="31 bytes"):
            index.sanity_check()


# --- KAFKA-10207: an untrimmed, zero-padded file (crash before close) ----------------------------------------------


def test_zero_padded_time_index_opens_with_its_real_entries(tmp_path):
    path = time_path(tmp_path)
    writer = TimeIndex(path, BASE, 4000 * 12)
    for i in range(1, 101):
        writer.maybe_append(1_700_000_000_000 + i, BASE + 10 * i)
    crashed = tmp_path / "crashed.timeindex"
    shutil.copyfile(path, crashed)  # the file as a crash leaves it: preallocated and zero-padded
    writer.close()
    assert os.path.getsize(crashed) == 4000 * 12
    with TimeIndex(crashed, BASE, 4000 * 12) as index:
        assert index.entries == 100  # not 4000 = length / 12, whose last "entry" would be (0, base)
        assert index.last_entry == (1_700_000_000_100, BASE + 1000)
        assert index.lookup(10**15) == (1_700_000_000_100, BASE + 1000)
        assert index.lookup(1_700_000_000_050) == (1_700_000_000_050, BASE + 500)
        index.maybe_append(1_700_000_000_200, BASE + 2000)
    assert crashed.read_bytes()[-12:] == time_bytes([(1_700_000_000_200, 2000)])
    assert os.path.getsize(crashed) == 101 * 12


@pytest.mark.parametrize("n", [0, 1, 2, 999, 1000, 4096])
def test_zero_padded_offset_index_opens_with_its_real_entries(tmp_path, n):
    path = offset_path(tmp_path)
    last = (BASE + n, 100 * n) if n else (BASE, 0)
    for writable in (False, True):
        path.write_bytes(offset_bytes([(i, 100 * i) for i in range(1, n + 1)]) + bytes(8 * (5000 - n)))
        with OffsetIndex(path, BASE, 5000 * 8, writable=writable) as index:
            assert index.entries == n
            assert index.max_entries == 5000
            assert index.last_entry == last
            assert index.lookup(BASE + 10**6) == last
            if writable:
                index.append(BASE + n + 1, 100 * (n + 1))
        if writable:
            assert os.path.getsize(path) == 8 * (n + 1)


def test_zero_entry_in_slot_zero_followed_by_entries_is_kept(tmp_path):
    # a time index whose first entry is (ts 0, base offset) is all zeros; the entries after it show it is real
    path = time_path(tmp_path)
    path.write_bytes(time_bytes([(0, 0), (10, 1), (20, 2)]) + bytes(12 * 50))
    with TimeIndex(path, BASE) as index:
        assert index.entries == 3 and index.entry(0) == (0, BASE)
        assert index.lookup(5) == (0, BASE)
    path.write_bytes(bytes(12 * 50))
    with TimeIndex(path, BASE) as index:
        assert index.entries == 0 and index.lookup(5) == (-1, BASE)


def test_garbage_after_the_valid_prefix_is_cut_and_cleared(tmp_path):
    path = offset_path(tmp_path)
    good = [(i, 10 * i) for i in range(1, 21)]
    garbage = [(3, 7), (99, 1)]  # goes back: not a continuation of the index
    path.write_bytes(offset_bytes(good + garbage) + bytes(8 * 30))
    before = path.read_bytes()
    with OffsetIndex(path, BASE, writable=False) as index:
        assert index.entries == 20 and index.last_entry == (BASE + 20, 200)
    assert path.read_bytes() == before
    with OffsetIndex(path, BASE) as index:
        assert index.entries == 20
        assert path.read_bytes()[8 * 20: 8 * 22] == bytes(16), "a writable open clears the leftovers"
        index.append(BASE + 21, 210)
        index.append(BASE + 22, 220)
    with OffsetIndex(path, BASE) as index:
        assert index.entries == 22 and index.last_entry == (BASE + 22, 220)


def test_verify_checks_the_whole_prefix(tmp_path):
    path = offset_path(tmp_path)
    entries = [(i, 10 * i) for i in range(1, 3001)]
    entries[100] = (100, 5)  # out of order, far from the tail
    path.write_bytes(offset_bytes(entries))
    with OffsetIndex(path, BASE, writable=False) as index:
        assert index.entries == 3000  # trusted below the tail, as Kafka trusts indexes below the recovery point
    with OffsetIndex(path, BASE, writable=False, verify=True) as index:
        assert index.entries == 100 and index.last_entry == (BASE + 100, 1000)


# --- resize / trim (LogSegmentTest index resizing) ---------------------------------------------------------------


def test_trim_and_re_expand(tmp_path):
    max_size = 64 * 12 * 8  # a multiple of both entry sizes
    index = OffsetIndex(offset_path(tmp_path), BASE, max_size)
    tindex = TimeIndex(time_path(tmp_path), BASE, max_size)
    for i in range(1, 11):
        index.append(BASE + i, 100 * i)
        tindex.maybe_append(1000 + i, BASE + i)
    assert index.trim_to_valid_size() and tindex.trim_to_valid_size()
    assert os.path.getsize(index.path) == 80 and os.path.getsize(tindex.path) == 120
    assert index.max_entries == 10 and index.is_full()
    assert not index.trim_to_valid_size(), "nothing to change the second time"
    assert index.lookup(BASE + 5) == (BASE + 5, 500) and tindex.lookup(1005) == (1005, BASE + 5)
    index.truncate_to(BASE)
    tindex.truncate_to(BASE)
    assert index.resize(max_size) and tindex.resize(max_size)
    assert index.max_entries == max_size // 8 and tindex.max_entries == max_size // 12
    assert os.path.getsize(index.path) == max_size
    index.append(BASE + 1, 1)
    tindex.maybe_append(5, BASE + 1)
    assert index.lookup(BASE + 1) == (BASE + 1, 1) and tindex.lookup(6) == (5, BASE + 1)
    index.close()
    tindex.close()


def test_resize_keeps_entries_and_refuses_to_drop_them(idx):
    for i in range(1, 11):
        idx.append(BASE + i, 100 * i)
    assert idx.resize(1000 * 8 + 5)
    assert idx.max_entries == 1000 and idx.length == 8000
    assert [idx.entry(i) for i in (0, 9)] == [(BASE + 1, 100), (BASE + 10, 1000)]
    assert not idx.resize(1000 * 8 + 7), "rounds down to the same length"
    with pytest.raises(ValueError):
        idx.resize(9 * 8)
    assert idx.entries == 10 and idx.max_entries == 1000


def test_resize_to_zero_then_back(idx):
    assert idx.resize(0)
    assert idx.max_entries == 0 and idx.is_full() and os.path.getsize(idx.path) == 0
    assert idx.lookup(BASE + 3) == (BASE, 0) and idx.to_numpy().size == 0
    assert idx.resize(16)
    idx.append(BASE + 1, 1)
    assert idx.lookup(BASE + 3) == (BASE + 1, 1)


# --- refresh(): entries appended by another object or process ----------------------------------------------------


def test_refresh_sees_appends_of_another_object(tmp_path):
    path = offset_path(tmp_path)
    writer = OffsetIndex(path, BASE, 100 * 8)
    for i in range(1, 11):
        writer.append(BASE + i, 10 * i)
    reader = OffsetIndex(path, BASE, writable=False)  # maps the preallocated, zero-padded file
    assert reader.entries == 10 and reader.max_entries == 100
    for i in range(11, 16):
        writer.append(BASE + i, 10 * i)
    assert reader.entries == 10 and reader.lookup(BASE + 99) == (BASE + 10, 100)
    assert reader.refresh() == 15
    assert reader.lookup(BASE + 99) == (BASE + 15, 150) and reader.last_offset == BASE + 15
    assert reader.refresh() == 15, "nothing new"
    writer.resize(300 * 8)
    for i in range(16, 151):
        writer.append(BASE + i, 10 * i)
    assert reader.refresh() == 150 and reader.max_entries == 300  # the file grew: remapped
    assert reader.lookup(BASE + 120) == (BASE + 120, 1200)
    writer.close()  # trims the file under the reader's mapping
    assert reader.lookup(BASE + 1000) == (BASE + 150, 1500)
    assert reader.refresh() == 150 and reader.max_entries == 150
    assert reader.to_numpy()["pos"][-1] == 1500
    reader.close()


def test_refresh_time_index(tmp_path):
    path = time_path(tmp_path)
    writer = TimeIndex(path, BASE, 100 * 12)
    reader = TimeIndex(path, BASE, writable=False)
    assert reader.entries == 0
    writer.maybe_append(0, BASE)  # all zeros: only counted once an entry follows it
    assert reader.refresh() == 0
    writer.maybe_append(100, BASE + 5)
    assert reader.refresh() == 2 and reader.last_entry == (100, BASE + 5) and reader.lookup(50) == (0, BASE)
    writer.close()
    reader.close()


def test_refresh_of_a_reader_opened_on_an_empty_file(tmp_path):
    path = offset_path(tmp_path)
    path.touch()
    with OffsetIndex(path, BASE, writable=False) as reader:
        assert reader.entries == 0 and reader.max_entries == 0 and reader.lookup(BASE + 5) == (BASE, 0)
        with OffsetIndex(path, BASE, 80) as writer:  # an empty file is (re)created at full size
            writer.append(BASE + 2, 20)
            assert reader.refresh() == 1 and reader.lookup(BASE + 5) == (BASE + 2, 20)


def _append_in_child(path: str, start: int, stop: int) -> None:
    index = OffsetIndex(path, BASE, 1000 * 8)
    for i in range(start, stop):
        index.append(BASE + i, 10 * i)
    index.flush()  # and no close: the file keeps its preallocated length, as a live writer's does


def test_refresh_sees_appends_of_another_process(tmp_path):
    path = offset_path(tmp_path)
    with OffsetIndex(path, BASE, 1000 * 8) as writer:
        for i in range(1, 6):
            writer.append(BASE + i, 10 * i)
        writer.flush()
        with OffsetIndex(path, BASE, writable=False) as reader:
            assert reader.entries == 5
            child = multiprocessing.get_context("fork").Process(target=_append_in_child, args=(str(path), 6, 501))
            child.start()
            child.join(60)
            if child.is_alive():
                child.kill()
            assert child.exitcode == 0
            assert reader.refresh() == 500
            assert reader.lookup(BASE + 250) == (BASE + 250, 2500)
            assert reader.last_entry == (BASE + 500, 5000)


# --- lifecycle and errors ----------------------------------------------------------------------------------------


def test_close_is_idempotent_and_closed_index_refuses_calls(tmp_path):
    index = OffsetIndex(offset_path(tmp_path), BASE, 80)
    index.append(BASE + 1, 1)
    index.close()
    index.close()
    assert index.closed
    for call in (lambda: index.lookup(BASE), lambda: index.append(BASE + 2, 2), index.flush, index.refresh,
                 index.to_numpy, lambda: index.entry(0)):
        with pytest.raises(LogClosedError):
            call()


def test_delete(tmp_path):
    index = OffsetIndex(offset_path(tmp_path), BASE, 80)
    index.append(BASE + 1, 1)
    assert index.delete() is True
    assert not index.path.exists() and index.closed
    assert index.delete() is False, "a missing file is fine"


def test_rename_to(tmp_path):
    index = OffsetIndex(offset_path(tmp_path), BASE, 80)
    index.append(BASE + 1, 1)
    new = tmp_path / (offset_path(tmp_path).name + ".deleted")
    index.rename_to(new)
    assert index.path == new and new.exists() and not offset_path(tmp_path).exists()
    index.append(BASE + 2, 2)
    assert index.lookup(BASE + 9) == (BASE + 2, 2)
    index.close()
    assert new.read_bytes() == offset_bytes([(1, 1), (2, 2)])
    gone = tmp_path / "gone.index"
    index.rename_to(gone)  # renaming a closed index moves its file too
    assert gone.exists() and not new.exists()


def test_os_errors_become_kafka_storage_errors(tmp_path):
    missing = tmp_path / "no-such.index"
    with pytest.raises(KafkaStorageError) as err:
        OffsetIndex(missing, BASE, writable=False)
    assert isinstance(err.value, OSError) and err.value.errno == 2 and str(missing) in str(err.value)
    with pytest.raises(KafkaStorageError):
        TimeIndex(tmp_path / "no-such-dir" / "0.timeindex", BASE)


def test_max_index_size_must_hold_an_entry(tmp_path):
    with pytest.raises(InvalidConfigError):
        TimeIndex(time_path(tmp_path), BASE, 11)
    assert not time_path(tmp_path).exists()


def test_abstract_index_cannot_be_opened(tmp_path):
    with pytest.raises(TypeError):
        AbstractIndex(tmp_path / "x.index", 0)


# --- property tests against a sorted-list model ------------------------------------------------------------------


class OffsetIndexModel(RuleBasedStateMachine):
    """Random appends, lookups, truncations, trims and reopens; the model is a sorted list of (offset, position)."""

    MAX = 3000  # above the warm section, so both halves of the search are used

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="kl-index-"))
        self.path = offset_path(self.dir)
        self.index = OffsetIndex(self.path, BASE, self.MAX * 8)
        self.offsets: list[int] = []
        self.positions: list[int] = []

    def teardown(self):
        self.index.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _next_offset(self):
        return self.offsets[-1] + 1 if self.offsets else BASE

    @rule(n=st.integers(1, 1500), seed=st.integers(0, 2**32 - 1))
    def append_run(self, n, seed):
        rnd = random.Random(seed)
        for _ in range(n):
            offset = self._next_offset() + rnd.randrange(0, 4)
            position = (self.positions[-1] if self.positions else 0) + rnd.randrange(0, 300)
            if len(self.offsets) >= self.index.max_entries:
                with pytest.raises(IndexFullError):
                    self.index.append(offset, position)
                return
            self.index.append(offset, position)
            self.offsets.append(offset)
            self.positions.append(position)

    @precondition(lambda self: self.offsets)
    @rule(back=st.integers(0, 5))
    def append_not_increasing(self, back):
        if self.index.is_full():
            return
        with pytest.raises(InvalidOffsetError):
            self.index.append(self.offsets[-1] - back, self.positions[-1])

    @rule(data=st.data())
    def lookups(self, data):
        hi = (self.offsets[-1] if self.offsets else BASE) + 3
        for target in data.draw(st.lists(st.integers(BASE - 3, hi), min_size=1, max_size=30)):
            i = bisect.bisect_right(self.offsets, target) - 1
            expected = (self.offsets[i], self.positions[i]) if i >= 0 else (BASE, 0)
            assert self.index.lookup(target) == expected

    @rule(data=st.data())
    def fetch_upper_bounds(self, data):
        hi = (self.positions[-1] if self.positions else 0) + 3
        for start in data.draw(st.lists(st.integers(0, hi), min_size=1, max_size=10)):
            i = bisect.bisect_left(self.positions, start)
            expected = (self.offsets[i], self.positions[i]) if i < len(self.offsets) else None
            assert self.index.fetch_upper_bound_offset(start, 0) == expected

    @rule(data=st.data())
    def truncate_to(self, data):
        hi = (self.offsets[-1] if self.offsets else BASE) + 3
        target = data.draw(st.integers(BASE - 1, hi))
        self.index.truncate_to(target)
        keep = bisect.bisect_left(self.offsets, target)
        del self.offsets[keep:], self.positions[keep:]

    def _forget_lone_zero_entry(self):
        if self.offsets == [BASE] and self.positions == [0]:
            # (base offset, 0) is all zeros: alone, it cannot be told from padding (Kafka never writes it)
            self.offsets, self.positions = [], []

    @rule()
    def close_and_reopen(self):
        self.index.close()
        assert os.path.getsize(self.path) == 8 * len(self.offsets)
        self.index = OffsetIndex(self.path, BASE, self.MAX * 8)
        self.index.resize(self.MAX * 8)  # re-expand, as the active segment does
        self._forget_lone_zero_entry()

    @rule()
    def crash_and_reopen(self):
        self.index.flush()
        del self.index  # no close: the file keeps its zero padding
        self.index = OffsetIndex(self.path, BASE, self.MAX * 8)
        self._forget_lone_zero_entry()

    @rule()
    def trim_then_expand(self):
        self.index.trim_to_valid_size()
        assert self.index.max_entries == len(self.offsets)
        self.index.resize(self.MAX * 8)

    @invariant()
    def matches_model(self):
        assert self.index.entries == len(self.offsets)
        assert self.index.last_entry == ((self.offsets[-1], self.positions[-1]) if self.offsets else (BASE, 0))
        view = self.index.to_numpy()
        assert view["rel"].tolist() == [o - BASE for o in self.offsets]
        assert view["pos"].tolist() == self.positions


TestOffsetIndexModel = OffsetIndexModel.TestCase
TestOffsetIndexModel.settings = settings(max_examples=60, stateful_step_count=25, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])


time_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(-1, 40), st.integers(0, 3)),  # (timestamp step, offset step)
        st.tuples(st.just("lookup"), st.integers(-5, 3000), st.just(0)),
        st.tuples(st.just("truncate_to"), st.integers(-2, 1500), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    max_size=400,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=time_ops)
def test_time_index_against_model(ops):
    max_entries = 200
    with tempfile.TemporaryDirectory(prefix="kl-tindex-") as d:
        path = time_path(Path(d))
        index = TimeIndex(path, BASE, max_entries * 12)
        model: list[tuple[int, int]] = []  # (timestamp, offset)
        try:
            for op, a, b in ops:
                last_ts, last_off = model[-1] if model else (-1, BASE)
                if op == "append":
                    ts, off = last_ts + a, last_off + b
                    if index.is_full():
                        with pytest.raises(IndexFullError):
                            index.maybe_append(ts, off)
                    elif model and ts < last_ts:
                        with pytest.raises(InvalidTimestampError):
                            index.maybe_append(ts, off)
                    else:
                        index.maybe_append(ts, off)
                        if ts > last_ts:
                            model.append((ts, off))
                elif op == "lookup":
                    i = bisect.bisect_right([t for t, _ in model], a) - 1
                    assert index.lookup(a) == (model[i] if i >= 0 else (-1, BASE))
                elif op == "truncate_to":
                    index.truncate_to(BASE + a)
                    model = [(t, o) for t, o in model if o < BASE + a]
                else:
                    index.close()
                    index = TimeIndex(path, BASE, max_entries * 12)
                    index.resize(max_entries * 12)
                    if model == [(0, BASE)]:
                        model = []  # a lone all-zero entry is indistinguishable from padding
                assert index.entries == len(model)
                assert index.last_entry == (model[-1] if model else (-1, BASE))
        finally:
            index.close()
