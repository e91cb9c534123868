"""LogStore.create_partitions and topic ids: a topic grows (never shrinks), a kill -9 in the middle of growing leaves
a usable topic (the new partitions whole or not there, the old ones' records untouched), and the topic id is
Kafka's (partition.metadata) and stable across reopen."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from kafkalog import LogStore
from kafkalog.errors import InvalidPartitionsError, UnknownTopicOrPartitionError
from kafkalog.storage.store import read_partition_metadata


def _fill(path):
    with LogStore(path) as s:
        s.create_topic("t", 2)
        for p in (0, 1):
            s.log("t", p).append_batch([b"r%d-%d" % (p, i) for i in range(5)])
            s.log("t", p).flush()
        return s.topic_id("t")


def test_create_partitions_grows_only_and_keeps_the_topic_id(tmp_path):
    tid = _fill(tmp_path)
    with LogStore(tmp_path) as s:
        with pytest.raises(InvalidPartitionsError):
            s.create_partitions("t", 1)
        with pytest.raises(InvalidPartitionsError):
            s.create_partitions("t", 2)
        with pytest.raises(UnknownTopicOrPartitionError):
            s.create_partitions("nope", 3)
        s.create_partitions("t", 4)
        assert s.partitions_for("t") == 4 and s.topic_id("t") == tid
        assert s.log("t", 3).append(b"new") == 0
    with LogStore(tmp_path, read_only=True) as s:  # another process's view, after a reopen
        assert s.partitions_for("t") == 4 and s.topic_id("t") == tid
        assert [r.value for r in s.log("t", 1).records(0)] == [b"r1-%d" % i for i in range(5)]
    assert {read_partition_metadata(tmp_path / f"t-{p}") for p in range(4)} == {tid}


@pytest.mark.parametrize("failpoint", ["atomic-write:before-fsync", "atomic-write:before-rename"])
def test_a_kill_while_growing_leaves_a_whole_topic(tmp_path, failpoint):
    tid = _fill(tmp_path)
    child = textwrap.dedent(f"""
        from kafkalog import LogStore
        with LogStore({str(tmp_path)!r}) as s:
            s.create_partitions("t", 4)
        print("grown")
    """)
    env = dict(os.environ, KAFKALOG_FAILPOINTS=f"{failpoint}=kill")
    # cwd: the data dir, so `-c` imports the installed kafkalog, never a source tree's unbuilt one
    r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == -9, (failpoint, r.returncode, r.stdout, r.stderr)  # killed at the registry write
    with LogStore(tmp_path) as s:
        n = s.partitions_for("t")
        assert n in (2, 4)
        assert s.topic_id("t") == tid
        for p in (0, 1):  # the old partitions' records, untouched
            assert [r.value for r in s.log("t", p).records(0)] == [b"r%d-%d" % (p, i) for i in range(5)]
        for p in range(2, n):  # a new partition is there whole: empty, writable, with the topic's id
            assert s.log("t", p).log_end_offset == 0 and s.log("t", p).append(b"x") == 0
            assert read_partition_metadata(tmp_path / f"t-{p}") == tid
        if n == 2:
            s.create_partitions("t", 4)  # the interrupted grow can be done again
            assert s.partitions_for("t") == 4
    r = subprocess.run([sys.executable, "-m", "kafkalog", "check", str(tmp_path)], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
