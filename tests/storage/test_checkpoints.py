"""The data dir's checkpoint files (issue 21, item 3): Kafka's text format byte for byte, topic names that cannot
split a line, and malformed files (of every checkpoint file, in every way) that never stop an open or a maintenance
round, never lose a log start offset kafkalog wrote, and are kept aside with a warning naming file and line."""

from __future__ import annotations

import logging
import re
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kafkalog
from kafkalog.errors import InvalidTopicError, KafkaStorageError
from kafkalog.storage import failpoints
from kafkalog.storage import store as store_module
from kafkalog.storage.checkpoints import MALFORMED_SUFFIX
from kafkalog.storage.files import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    format_checkpoint,
    parse_checkpoint,
    read_checkpoint,
)

# ---------------------------------------------------------------------------------------------------- the format

GOLDEN = [
    ({}, b"0\n0\n"),
    ({("my-topic", 1): 77, ("my-topic", 0): 1234}, b"0\n2\nmy-topic 0 1234\nmy-topic 1 77\n"),
    ({("a.b_c-D", 2147483647): 9223372036854775807, ("z", 0): -1},
     b"0\n2\na.b_c-D 2147483647 9223372036854775807\nz 0 -1\n"),
]


@pytest.mark.parametrize("entries, data", GOLDEN)
def test_golden_bytes(entries, data):
    assert format_checkpoint(entries) == data
    assert read_checkpoint(data) == (entries, [])
    assert parse_checkpoint(data, "f") == entries


# (bytes, the well-formed entries, the 1-based lines the problems must name)
MALFORMED = {
    "one field (issue 21)": (b"0\n2\nt 0 5\nfoo\n", {("t", 0): 5}, [4, 2]),
    "two fields": (b"0\n2\nt 0 5\nu 0\n", {("t", 0): 5}, [4, 2]),
    "four fields": (b"0\n2\nt 0 5\nu v 0 3\n", {("t", 0): 5}, [4, 2]),
    "not an integer": (b"0\n2\nt 0 5\nu 0 1x\n", {("t", 0): 5}, [4, 2]),
    "underscored integer": (b"0\n2\nt 0 5\nu 0 1_0\n", {("t", 0): 5}, [4, 2]),
    "past int64": (b"0\n2\nt 0 5\nu 0 9999999999999999999\n", {("t", 0): 5}, [4, 2]),
    "count too high": (b"0\n3\nt 0 5\nu 0 7\n", {("t", 0): 5, ("u", 0): 7}, [2]),
    "count too low": (b"0\n1\nt 0 5\nu 0 7\n", {("t", 0): 5, ("u", 0): 7}, [2]),
    "count missing": (b"0\n", {}, [2]),
    "count not a number": (b"0\nmany\nt 0 5\n", {("t", 0): 5}, [2]),
    "version 1": (b"1\n1\nt 0 5\n", {("t", 0): 5}, [1]),
    "empty header": (b"\n\nt 0 5\n", {("t", 0): 5}, [1, 2]),
    "a second entry": (b"0\n2\nt 0 5\nt 0 6\n", {("t", 0): 6}, [4]),
    "truncated mid-line": (b"0\n2\nt 0 5\nu 0", {("t", 0): 5}, [4, 2]),
    "not UTF-8": (b"0\n2\nt 0 5\nu\xff 0 3\n", {("t", 0): 5}, [4, 2]),
    "zero-filled": (b"\0" * 64, {}, [1, 2]),
    "garbage": (bytes(range(256)) * 2, {}, [1]),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_read_takes_well_formed_entries_and_names_every_bad_line(case):
    data, entries, lines = MALFORMED[case]
    got, problems = read_checkpoint(data)
    assert got == entries
    assert [int(re.match(r"line (\d+)", p).group(1)) for p in problems][:len(lines)] == lines, problems
    with pytest.raises(KafkaStorageError, match=r"malformed checkpoint f: line \d+"):
        parse_checkpoint(data, "f")


writable = st.text(st.sampled_from("abcXYZ019._-"), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.tuples(writable, st.integers(0, 2**31 - 1)), st.integers(-1, 2**63 - 1), max_size=20))
def test_every_writable_map_reads_back_as_itself(entries):
    assert read_checkpoint(format_checkpoint(entries)) == (entries, [])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_read_never_raises(data):
    entries, problems = read_checkpoint(data)
    assert all(isinstance(p, str) and p.startswith("line ") for p in problems)
    # whatever was taken can be written and reads back the same
    assert read_checkpoint(format_checkpoint(entries))[0] == entries


@pytest.mark.parametrize("topic", ["a b", "t\tx", "t\r", "t\x0b", "t\x1c", "t\u2028", "", " t", "t\n\n",
                                   "t\udcff", "t\nu"])
def test_an_entry_that_would_not_read_back_is_refused_and_the_file_kept(tmp_path, topic):
    f = OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT)
    f.write({("t", 0): 5})
    before = f.path.read_bytes()
    with pytest.raises(KafkaStorageError, match="not written"):
        f.write({("t", 0): 5, (topic, 0): 7})
    assert f.path.read_bytes() == before


# ---------------------------------------------------------------------------------------------------- the cause

@pytest.mark.parametrize("name", ["t\n", "fz-r3\n", "\n", "t\r\n", "t\r", "t\n\n", "t\x0b"])
def test_a_topic_name_with_a_line_break_is_illegal(open_store, data_dir, name):
    """Issue 21: ``_TOPIC_RE.match`` with ``$`` took "t\\n" (``$`` matches before a final newline), so CreateTopics,
    Metadata auto-create and create_topic made a topic whose checkpoint line "t\\n 0 5" is two lines."""
    store = open_store()
    with pytest.raises(InvalidTopicError):
        store.create_topic(name)
    with pytest.raises(InvalidTopicError):
        kafkalog.KafkaAdminClient(store).create_topics([kafkalog.NewTopic(name, 1, 1)])
    assert store.topics() == []
    assert [p.name for p in data_dir.iterdir() if p.is_dir()] == []


def test_a_partition_dir_with_a_line_break_is_no_topic(open_store, data_dir):
    store = open_store()
    store.close()
    (data_dir / "t-0\n").mkdir()
    assert open_store().topics() == []


# ---------------------------------------------------------------------------------------------------- malformed files

def _store_with_checkpoints(open_store, data_dir):
    """A store whose topic t has records 0..9 in segments of 2 batches, log start 5 (5..9 readable), recovery point
    10, and a compacted topic c with a cleaner offset; closed cleanly."""
    store = open_store({"segment.bytes": 200})
    store.create_topic("t", 1)
    log = store.log("t", 0)
    for i in range(10):
        log.append(b"v%d" % i)
    log.flush()
    log.delete_records_before(5)
    store.create_topic("u", 1)
    store.log("u", 0).append(b"x")
    store.close()
    return {"t": 5}


FILES = {
    LOG_START_OFFSET_CHECKPOINT: ("t 0 5", lambda s: s.log("t", 0).log_start_offset, 5),
    RECOVERY_POINT_CHECKPOINT: ("t 0 10", lambda s: s._checkpoints.recovery_point("t", 0), 10),
    CLEANER_OFFSET_CHECKPOINT: ("t 0 4", lambda s: s._checkpoints.cleaner_offset("t", 0), 4),
}
BAD_LINES = {
    "one field (issue 21)": b"foo\n",
    "two fields": b"u 0\n",
    "not an integer": b"u 0 1x\n",
    "not UTF-8": b"u\xff 0 3\n",
}


@pytest.mark.parametrize("unclean_open", [False, True], ids=["clean", "unclean"])
@pytest.mark.parametrize("bad", list(BAD_LINES))
@pytest.mark.parametrize("name", list(FILES))
def test_a_malformed_checkpoint_never_stops_an_open(open_store, data_dir, unclean, caplog, name, bad, unclean_open):
    """Every checkpoint file, malformed in each way the issue's line could be: the store opens (after a clean and
    an unclean shutdown: recovery reads every file), takes the well-formed entry, warns once naming the file and
    the line, keeps the file as it was beside it and rewrites it; the next open is quiet."""
    _store_with_checkpoints(open_store, data_dir)
    good, value_of, expected = FILES[name]
    path = data_dir / name
    data = b"0\n2\n" + BAD_LINES[bad] + good.encode() + b"\n"
    path.write_bytes(data)
    if unclean_open:
        unclean(data_dir)
    caplog.set_level(logging.WARNING, logger="kafkalog")
    store = open_store()
    assert value_of(store) == expected
    assert next(iter(store.log("t", 0).records())).value == b"v5"  # never a record below the log start
    warnings = [r.getMessage() for r in caplog.records if "malformed checkpoint" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and "line 3:" in warnings[0]
    aside = data_dir / f"{name}{MALFORMED_SUFFIX}{zlib.crc32(data):08x}"
    assert aside.read_bytes() == data
    assert aside.name in warnings[0]
    assert good in path.read_text()
    parse_checkpoint(path.read_bytes(), path)  # rewritten well-formed
    store.run_maintenance()
    store.log("t", 0).delete_records_before(6)
    store.close()
    caplog.clear()
    store = open_store()
    assert store.log("t", 0).log_start_offset == 6
    assert not [r for r in caplog.records if "malformed" in r.getMessage()]


def test_the_issues_maintenance_round_and_delete_records_go_on(open_store, data_dir, caplog):
    """The broker's warning: every maintenance round after the malformed file failed, and so did every
    delete-before and every new partition's open."""
    _store_with_checkpoints(open_store, data_dir)
    for name in FILES:  # the line the issue's broker read: "fz-r3\n 0 5" as the old validation let it be written
        text = (data_dir / name).read_bytes() if (data_dir / name).exists() else b"0\n0\n"
        (data_dir / name).write_bytes(text + b"fz-r3\n")
    caplog.set_level(logging.WARNING, logger="kafkalog")
    store = open_store(maintenance=False, exclusive=False)
    store.create_topic("v", 1)
    store.log("v", 0).append(b"a")
    store.log("v", 0).delete_records_before(1)
    store.run_maintenance()
    assert store.log("t", 0).log_start_offset == 5
    assert not [r for r in caplog.records if "maintenance round failed" in r.getMessage()]
    for name in FILES:
        parse_checkpoint((data_dir / name).read_bytes(), name)


def test_a_read_only_store_warns_and_writes_nothing(open_store, data_dir, caplog):
    _store_with_checkpoints(open_store, data_dir)
    path = data_dir / LOG_START_OFFSET_CHECKPOINT
    data = b"0\n2\nt 0 5\nfoo\n"
    path.write_bytes(data)
    caplog.set_level(logging.WARNING, logger="kafkalog")
    store = open_store(read_only=True, exclusive=False)
    assert store.log("t", 0).log_start_offset == 5
    assert store.log("u", 0).log_start_offset == 0
    warnings = [r.getMessage() for r in caplog.records if "malformed checkpoint" in r.getMessage()]
    assert len(warnings) == 1 and "line 4:" in warnings[0] and "read-only" in warnings[0]
    assert path.read_bytes() == data
    assert not list(data_dir.glob("*" + MALFORMED_SUFFIX + "*"))


@pytest.mark.parametrize("point", ["checkpoint-aside:before-rename", "checkpoint:before-rename"])
def test_a_repair_cut_off_leaves_the_file_as_it_was(open_store, data_dir, point):
    """A failing disk while the malformed file is copied aside or rewritten: the open fails naming the file, the
    file is as it was, and the next open repairs it."""
    _store_with_checkpoints(open_store, data_dir)
    path = data_dir / LOG_START_OFFSET_CHECKPOINT
    data = b"0\n2\nt 0 5\nfoo\n"
    path.write_bytes(data)
    store = open_store()
    failpoints.enable(point, "raise")
    try:
        with pytest.raises(KafkaStorageError, match="checkpoint"):
            store.log("t", 0)
    finally:
        failpoints.disable(point)
    store.close()
    assert path.read_bytes() == data
    assert open_store().log("t", 0).log_start_offset == 5


def test_a_newline_topic_of_an_older_kafkalog_keeps_its_log_start(open_store, data_dir, monkeypatch, caplog):
    """A data dir written before the fix holds "old\\n 0 5": read as the one entry it is (dropping it would bring
    the records below 5 back), written back in that form when another partition's start moves, and quiet."""
    store = open_store()
    monkeypatch.setattr(store_module, "validate_topic_name", lambda name: None)  # as create_topic took it before
    store.create_topic("old\n", 1)
    log = store.log("old\n", 0)
    for i in range(10):
        log.append(b"o%d" % i)
    log.delete_records_before(5)
    store.close()
    monkeypatch.undo()
    assert b"old\n 0 5\n" in (data_dir / LOG_START_OFFSET_CHECKPOINT).read_bytes()
    caplog.set_level(logging.WARNING, logger="kafkalog")
    store = open_store()
    assert store.log("old\n", 0).log_start_offset == 5
    assert next(iter(store.log("old\n", 0).records())).value == b"o5"
    store.create_topic("t", 1)
    store.log("t", 0).append(b"a")
    store.log("t", 0).delete_records_before(1)
    store.run_maintenance()
    store.close()
    store = open_store()
    assert store.log("old\n", 0).log_start_offset == 5
    assert store.log("t", 0).log_start_offset == 1
    assert not [r for r in caplog.records if "malformed" in r.getMessage()]
    store.delete_topic("old\n")
    assert b"old" not in (data_dir / LOG_START_OFFSET_CHECKPOINT).read_bytes()


def test_deleting_a_topic_rewrites_only_the_checkpoints_that_name_it(open_store, data_dir):
    """A topic deletion drops the topic's lines from every checkpoint file; a file without such lines is not
    rewritten (each rewrite is a new file, two fsyncs): deleting a topic that was never checkpointed, the common case
    of a short-lived test topic, writes none of them."""
    store = open_store()
    store.create_topic("t", 1)
    store.log("t", 0).append_batch([b"a", b"b", b"c"])
    store.log("t", 0).delete_records_before(2)
    store.log("t", 0).flush()
    store.run_maintenance()  # the recovery point checkpointed
    paths = [data_dir / RECOVERY_POINT_CHECKPOINT, data_dir / LOG_START_OFFSET_CHECKPOINT]
    assert all(("t", 0) in parse_checkpoint(p.read_bytes(), p.name) for p in paths)
    before = [(p.stat().st_ino, p.read_bytes()) for p in paths]
    store.create_topic("v", 2)
    store.log("v", 0).append(b"x")
    store.delete_topic("v")
    assert [(p.stat().st_ino, p.read_bytes()) for p in paths] == before
    store.delete_topic("t")
    for p, (ino, _) in zip(paths, before):
        assert p.stat().st_ino != ino
        assert parse_checkpoint(p.read_bytes(), p.name) == {}
