"""The durable queue's compiled half (delivery.pyx): the ack journal's AckRecords (golden bytes), their runs, and
Messages built from claimed records. DurableQueue itself, threads and processes included, is tested in
tests/client/test_queue.py."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog._engine import batch as R
from kafkalog._engine.delivery import ACK_RECORD_BYTES, Message, QueueCore, journal_offsets


def _journal(offsets, size=None):
    core = QueueCore()
    buf = bytearray(size if size is not None else ACK_RECORD_BYTES * max(1, len(offsets)))
    core._journal_attach(buf)
    stored = [core._journal_store(o) for o in offsets]
    return core, buf, stored


def test_ack_records_are_offset_and_its_complement_big_endian():
    core, buf, stored = _journal([5, 1 << 40])
    assert stored == [True, True] and core._jpos == 32
    assert bytes(buf) == struct.pack(">qqqq", 5, ~5, 1 << 40, ~(1 << 40))
    assert journal_offsets(buf) == [5, 1 << 40]


def test_a_torn_or_zeroed_record_ends_the_journal():
    core, buf, _ = _journal([1, 2, 3])
    buf[16 + 12] ^= 0xFF  # record 2's Check no longer matches
    assert journal_offsets(buf) == [1]
    core._journal_clear()
    assert core._jpos == 0 and bytes(buf) == bytes(len(buf)) and journal_offsets(buf) == []
    assert journal_offsets(bytes(40)) == [] and journal_offsets(struct.pack(">qq", 7, ~7) + b"\x01") == [7]


def test_a_full_journal_refuses_the_store():
    core, _, stored = _journal([1, 2, 3], size=2 * ACK_RECORD_BYTES + 8)
    assert stored == [True, True, False] and core._jpos == 32


@given(st.lists(st.integers(0, 60), max_size=40))
def test_journal_runs_are_the_sorted_distinct_offsets(offsets):
    core, _, _ = _journal(offsets)
    want, distinct = [], sorted(set(offsets))
    for o in distinct:
        if want and want[-1][1] == o:
            want[-1] = (want[-1][0], o + 1)
        else:
            want.append((o, o + 1))
    assert core._journal_runs() == want


def test_messages_are_built_from_the_claimed_records():
    buf = R.build_batch([b"a", None, b"c"], keys=[None, b"k", b"kk"], timestamps=[10, 11, 12],
                        headers=[[("h", b"1")], [], []], base_offset=40)
    core = QueueCore()
    assert core._take(R.iter_records(buf, min_offset=41), 2, 100) == 2
    assert core._buffer_len() == 2
    m = core._pop()
    assert isinstance(m, Message) and core._held == {m}
    assert (m.offset, m.key, m.value, m.timestamp, m.headers, m.delivery_count, m.redelivered) == \
        (41, b"k", None, 11, [], 2, True)
    assert [x.offset for x in core._buffered()] == [42] and core._pop().offset == 42 and core._pop() is None
    assert core._take(R.iter_records(buf), 1, 1) == 1 and core._pop().headers == [("h", b"1")]
    with pytest.raises(TypeError):
        core._take(iter([]), 1, 1)  # a RecordStream only
