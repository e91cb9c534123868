"""LogSegment on its own (Kafka's LogSegmentTest): reads and truncation around offset gaps."""

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
