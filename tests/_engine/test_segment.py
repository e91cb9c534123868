"""LogSegment on its own (Kafka's LogSegmentTest): reads and truncation around offset gaps."""

import pytest

from kafkalog._engine.batch import build_batch, iter_batches
from kafkalog._engine.segment import LogSegment

T0 = 1_700_000_000_000


def _segment(tmp_path, bases=(50, 60)):
    seg = LogSegment(tmp_path, 40, index_interval_bytes=1, create=True)
    for b in bases:
        seg.append(build_batch([b"a", b"b"], timestamps=[T0 + b, T0 + b + 1], base_offset=b))
    return seg


def test_read_in_a_gap_returns_the_next_batch(tmp_path):
    seg = _segment(tmp_path)
    assert seg.read(40, 10**6) is not None  # before the first offset: the first batch
    (b,) = list(iter_batches(seg.read(55, 1)))
    assert (b.base_offset, b.last_offset) == (60, 61)
    assert seg.read(62, 10**6) is None
    seg.close()


def test_truncate_to_an_offset_in_a_gap_removes_the_later_batch(tmp_path):
    seg = _segment(tmp_path, bases=(50, 60, 70))
    first_batch_size = seg.translate_offset(50)[2]
    assert seg.truncate_to(55) > 0
    assert (seg.size, seg.next_offset) == (first_batch_size, 52)
    assert seg.read(60, 10**6) is None
    assert seg.max_timestamp_so_far == T0 + 51
    seg.append(build_batch([b"c"], timestamps=[T0 + 80], base_offset=52))
    assert [b.base_offset for b in iter_batches(seg.read(50, 10**6))] == [50, 52]
    seg.close()


# ------------------------------------------------------------------------------------------------ the time seek

def test_offset_for_time_across_segments_matches_a_scan_of_the_records(tmp_path):
    """The compiled seek over a list of segments: the first record at or past the start whose timestamp reaches the
    target, in offset order (timestamps out of order inside batches, a LogAppendTime batch, a compressed batch, the
    start inside a batch), None at or past the end; the same answer as a scan of every record."""
    import random

    from kafkalog._engine.segment import offset_for_time
    rng = random.Random(5)
    segs, recs, nxt = [], [], 0
    for base in (0, 40, 90):
        seg = LogSegment(tmp_path, base, index_interval_bytes=64, create=True)
        for k in range(3):
            n = 10 + k * 3
            ts = [T0 + base * 10 + rng.randrange(0, 400) for _ in range(n)]
            append_time = base == 40 and k == 1
            data = build_batch([b"v%d" % i for i in range(n)], timestamps=ts, base_offset=nxt,
                               compression=3 if base == 90 and k == 0 else 0, timestamp_type=1 if append_time else 0)
            if append_time:
                ts = [max(ts)] * n  # every record reads as the batch's max timestamp
            seg.append(data)
            recs += [(nxt + i, t) for i, t in enumerate(ts)]
            nxt += n
        segs.append(seg)
        nxt = max(nxt, [40, 90, 10**9][len(segs) - 1])  # a gap before the next segment's base
    end = recs[-1][0] + 1
    for start in (0, 5, 41, 95):
        for target in list(range(T0 - 5, T0 + 1400, 7)) + [T0 + 10**6]:
            want = next(((o, t) for o, t in recs if o >= start and t >= target), None)
            got = offset_for_time(segs, target, start, end)
            assert (None if got is None else (got.offset, got.timestamp)) == want, (start, target)
            assert offset_for_time(segs, target, start, want[0] if want else end) is None
    assert offset_for_time([], T0, 0, 0) is None
    for seg in segs:
        seg.close()


# ------------------------------------------------------------------------------------------------ the change counter

def test_change_counter_file_is_64_bytes_of_magic_version_changes_retired(tmp_path):
    import struct

    from kafkalog._engine.segment import CHANGE_COUNTER_FILE, ChangeCounter
    path = str(tmp_path / CHANGE_COUNTER_FILE)
    w = ChangeCounter(path, True)
    r = ChangeCounter(path, False)
    raw = open(path, "rb").read()
    assert len(raw) == 64 and raw[:4] == b"KLCC" and struct.unpack("<I", raw[4:8])[0] == 1
    assert r.seen == r.load() == w.load() and r.unchanged()
    assert w.bump() == r.seen and not r.unchanged() and r.load() == r.seen + 1
    assert struct.unpack("<QQ", open(path, "rb").read()[8:24]) == (r.load(), 0)  # the file is the mapping
    r.seen = r.load()
    w.seen = w.load()
    assert w.advance() == w.seen - 1  # nobody else counted: the writer's own change is seen
    r.seen = r.load()
    before = w.seen
    w.bump()  # "another writer"
    w.advance()
    assert w.seen == before  # someone else's change came first: still to be taken in
    w.retire()
    assert r.retired and not r.unchanged()
    with pytest.raises(ValueError):
        r.bump()
    w.revive()
    assert not r.retired
    w.close()
    r.close()
    assert not r.unchanged()


@pytest.mark.parametrize("content", [b"", b"KLCC", bytes(64), b"x" * 64, b"KLCC" + bytes(60)])
def test_change_counter_a_reader_refuses_a_bad_file_a_writer_repairs_it_in_place(tmp_path, content):
    import os

    from kafkalog._engine.segment import ChangeCounter
    path = tmp_path / ".kafkalog-changes"
    path.write_bytes(content)
    ino = path.stat().st_ino
    with pytest.raises(ValueError):
        ChangeCounter(str(path), False)
    w = ChangeCounter(str(path), True)
    assert path.stat().st_ino == ino and path.stat().st_size == 64  # the same file: never a new one
    r = ChangeCounter(str(path), False)
    assert r.load() == w.load()
    w.close()
    r.close()
    with pytest.raises(OSError):
        ChangeCounter(str(tmp_path / "missing"), False)
    with pytest.raises(OSError):
        ChangeCounter(str(tmp_path / "missing"), True, create=False)
    assert not os.path.exists(tmp_path / "missing")


def test_change_counter_of_a_later_version_is_counted_in_and_left_as_it_is(tmp_path):
    """A later version may only add words after Changes and Retired: its file is used as it is (header kept)."""
    import struct

    from kafkalog._engine.segment import ChangeCounter
    path = tmp_path / ".kafkalog-changes"
    path.write_bytes(b"KLCC" + struct.pack("<IQQ", 2, 41, 0) + b"\x07" * 40)
    w = ChangeCounter(str(path), True)
    r = ChangeCounter(str(path), False)
    assert r.load() == 41 and w.bump() == 41 and not r.unchanged()
    raw = path.read_bytes()
    assert raw[:8] == b"KLCC" + struct.pack("<I", 2) and raw[24:] == b"\x07" * 40
    w.close()
    r.close()
