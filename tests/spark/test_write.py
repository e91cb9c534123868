"""Batch and streaming writes read back through the engine: Spark-Kafka sink columns, the embedded producer's
partitioning, exactly-once micro-batches (replays skipped, failed tasks leave nothing), and the publish protocol
driven directly through a crash in the middle of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import kafkalog  # noqa: E402
from kafkalog.client.partitioner import hash_partition  # noqa: E402
from kafkalog.spark import sink as sink_mod  # noqa: E402
from kafkalog.storage import failpoints  # noqa: E402

from .conftest import engine_rows, run_available_now, write_records  # noqa: E402


def staged_files(path) -> list:
    root = Path(path) / sink_mod.STATE_DIR / "staging"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_batch_write_columns_partitioning_and_headers(spark, tmp_path):
    path = str(tmp_path / "data")
    with kafkalog.LogStore(path, maintenance=False) as store:
        store.create_topic("w1", partitions=3)
        store.create_topic("w2", partitions=2)
    keyed = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(30)], "key string, value string")
    keyed.write.format("kafkalog").option("topic", "w1").mode("append").save(path)
    got = engine_rows(path, "w1")
    assert sorted((k, v) for _, _, k, v, _ in got) == sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(30))
    assert all(p == hash_partition(k, 3) for p, _, k, _, _ in got)  # as the embedded producer places keys
    mixed = spark.createDataFrame(
        [("w2", 1, None, b"a", [("h", b"1"), ("n", None)]), ("w2", 0, b"k", b"b", None), ("w2", 1, None, b"c", [])],
        "topic string, partition int, key binary, value binary, headers array<struct<key:string,value:binary>>")
    mixed.write.format("kafkalog").mode("append").save(path)
    assert engine_rows(path, "w2") == [(0, 0, b"k", b"b", []), (1, 0, None, b"a", [("h", b"1"), ("n", None)]),
                                      (1, 1, None, b"c", [])]
    assert staged_files(path) == []


@pytest.mark.parametrize("mode, columns, message", [
    ("append", "key string", r"Required attribute 'value' not found"),
    ("append", "value int", r"value attribute type must be a string or binary, got int"),
    ("overwrite", "value string", r"Save mode Overwrite is not allowed for kafkalog"),
])
def test_batch_write_rejected_at_planning(spark, tmp_path, mode, columns, message):
    df = spark.createDataFrame([], columns)
    with pytest.raises(Exception, match=message):
        df.write.format("kafkalog").option("topic", "t").mode(mode).save(str(tmp_path / "data"))
    assert not (tmp_path / "data").exists()


def _copy_stream(spark, path, source, target, ckpt, value_expr="value"):
    df = (spark.readStream.format("kafkalog").option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "12").option("includeHeaders", "true").load(path)
          .selectExpr("key", f"{value_expr} AS value", "headers"))
    return run_available_now(df.writeStream.format("kafkalog").option("topic", target)
                             .option("checkpointLocation", str(ckpt)).option("path", path))


def _copied(path, topic):
    return sorted(((k, v, h) for _, _, k, v, h in engine_rows(path, topic)), key=repr)


def _source(rows):
    return sorted(((r[0], r[1], [] if r[7] is None else r[7]) for r in rows), key=repr)


def test_stream_write_exactly_once_and_a_replayed_batch_is_skipped(spark, tmp_path):
    path, ckpt = str(tmp_path / "data"), tmp_path / "ckpt"
    rows = write_records(path, "src", 3, 10)
    with kafkalog.LogStore(path, maintenance=False) as store:
        store.create_topic("dst", partitions=2)
    q = _copy_stream(spark, path, "src", "dst", ckpt)
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [12, 12, 6]  # maxOffsetsPerTrigger
    assert _copied(path, "dst") == _source(rows)
    assert all(p == hash_partition(k, 2) for p, _, k, _, _ in engine_rows(path, "dst") if k is not None)
    sink_id = q.id
    assert sink_mod.sink_state(path, sink_id) == {"version": 1, "committed": 2, "pending": None}
    # a crash after the sink published batch 2 and before Spark logged its commit: Spark replays batch 2
    for name in ("2", ".2.crc"):
        (ckpt / "commits" / name).unlink()
    q = _copy_stream(spark, path, "src", "dst", ckpt)
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [2]  # it did run again...
    assert _copied(path, "dst") == _source(rows)  # ... and published nothing twice
    assert staged_files(path) == []


def _committed_values(path, topic) -> list:
    """What a read_committed consumer of ``topic`` reads now (every partition, from the start to its LSO)."""
    with kafkalog.LogStore(path, read_only=True) as store:
        c = kafkalog.KafkaConsumer(store=store, isolation_level="read_committed", auto_offset_reset="earliest",
                                   enable_auto_commit=False)
        c.assign([kafkalog.TopicPartition(topic, p) for p in range(store.partitions_for(topic))])
        got = []
        for _ in range(50):  # polls, bounded: everything below each LSO is in memory
            batch = c.poll(timeout_ms=0)
            if not batch:
                break
            got.extend(r.value for rs in batch.values() for r in rs)
        c.close()
    return sorted(got)


@pytest.mark.slow  # two streaming queries (~25 s on 2 cores), for the default suite's 20-minute budget
def test_stream_write_beside_an_open_transaction(spark, tmp_path):
    """The sink publishes while a transactional producer holds a transaction open on the same partitions: its
    micro-batches (and a replayed one, which it finds in the logs by its producer id and sequence) are published
    once; read_committed readers see them only once the transaction ended (they sit above its first offset, the LSO),
    and an abort hides the transaction's records alone."""
    path, ckpt = str(tmp_path / "data"), tmp_path / "ckpt"
    rows = write_records(path, "src", 3, 10)
    with kafkalog.LogStore(path, maintenance=False) as store:
        store.create_topic("dst", partitions=2)
        txn = kafkalog.KafkaProducer(store, transactional_id="beside-the-sink")
        txn.init_transactions()
        txn.begin_transaction()
        for p in (0, 1):
            txn.send("dst", b"open-%d" % p, partition=p)
        txn.flush()
        assert _committed_values(path, "dst") == []  # the LSO of each partition is the transaction's first offset
        q = _copy_stream(spark, path, "src", "dst", ckpt)
        for name in ("2", ".2.crc"):  # Spark replays the last micro-batch (see the test above)
            (ckpt / "commits" / name).unlink()
        q = _copy_stream(spark, path, "src", "dst", ckpt)
        assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [2]
        copied = sorted(v for _, _, _, v, _ in engine_rows(path, "dst") if not v.startswith(b"open-"))
        assert copied == sorted(r[1] for r in rows)  # every source record once, the replay published nothing
        assert _committed_values(path, "dst") == []  # all above the open transaction: not stable yet
        txn.abort_transaction()
        assert _committed_values(path, "dst") == copied  # the sink's records; the aborted ones never
        txn.close()
    assert sink_mod.sink_state(path, q.id) == {"version": 1, "committed": 2, "pending": None}
    assert staged_files(path) == []


def test_task_failure_in_a_stream_write_leaves_no_partial_batch(spark, tmp_path):
    path, ckpt = str(tmp_path / "data"), tmp_path / "ckpt"
    rows = write_records(path, "fsrc", 3, 8)  # batches of 12: offsets 0-3, then 4-7 of each partition
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")  # the writer gets rows before the failure
    try:
        with pytest.raises(Exception, match="injected failure"):
            _copy_stream(spark, path, "fsrc", "fdst", ckpt,
                         "CASE WHEN value = CAST('2:6' AS BINARY) THEN raise_error('injected failure') ELSE value END")
        assert _copied(path, "fdst") == _source([r for r in rows if r[4] < 4])  # batch 0 only, nothing of batch 1
        assert staged_files(path) == []
        q = _copy_stream(spark, path, "fsrc", "fdst", ckpt)  # restart: batch 1 again, then nothing more
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [1]
    assert _copied(path, "fdst") == _source(rows)
    assert sink_mod.sink_state(path, q.id)["committed"] == 1
    assert staged_files(path) == []


# ---------------------------------------------------------------------------------------------------- no Spark


def _stage(path, sink, batch_id, values, partitions):
    layout = sink_mod.Layout(key=False, topic=False, partition=True, headers=False)
    batch = pa.RecordBatch.from_pydict({"value": values, "partition": partitions},
                                       schema=pa.schema([("value", pa.binary()), ("partition", pa.int32())]))
    stamp = (sink_mod.producer_id_for(sink), 0, batch_id)
    return sink_mod.stage_task(path, layout, "pub", sink, batch_id, stamp, iter([batch]))


def test_publish_interrupted_midway_is_finished_once(tmp_path):
    path = str(tmp_path / "data")
    with kafkalog.LogStore(path, maintenance=False) as store:
        store.create_topic("pub", partitions=3)
    tasks = [_stage(path, "s", 0, [f"{t}-{i}".encode() for i in range(6)], [i % 3 for i in range(6)])
             for t in ("a", "b")]
    assert [len(m.files) for m in tasks] == [3, 3]
    appends = []

    def crash_on_fourth():
        appends.append(1)
        if len(appends) == 4:  # pub-0: both files in; pub-1: the first file in, the second not; pub-2: nothing
            raise OSError(5, "injected crash")

    failpoints.enable("append:before-write", crash_on_fourth)
    try:
        with pytest.raises(OSError, match="injected crash"):
            sink_mod.publish_stream_batch(path, "s", 0, tasks)
    finally:
        failpoints.disable("append:before-write")
    state = sink_mod.sink_state(path, "s")
    assert state["committed"] == -1 and state["pending"]["batch"] == 0
    assert [len([r for r in engine_rows(path, "pub") if r[0] == p]) for p in range(3)] == [4, 2, 0]
    # Spark replays batch 0: its tasks stage again (different files), the commit finishes the first attempt
    replay = [_stage(path, "s", 0, [b"replayed"], [0])]
    assert sink_mod.publish_stream_batch(path, "s", 0, replay) == "skipped"
    want = sorted(f"{t}-{i}".encode() for t in ("a", "b") for i in range(6))
    got = engine_rows(path, "pub")
    assert sorted(v for _, _, _, v, _ in got) == want  # every record once, none of the replay's
    assert all(int(v.split(b"-")[1]) % 3 == p for p, _, _, v, _ in got)
    assert sink_mod.sink_state(path, "s") == {"version": 1, "committed": 0, "pending": None}
    assert staged_files(path) == []
    # the next micro-batch publishes normally; an abort drops only its own staging
    assert sink_mod.publish_stream_batch(path, "s", 1, [_stage(path, "s", 1, [b"next"], [2])]) == "published"
    _stage(path, "s", 2, [b"aborted"], [1])
    sink_mod.abort_stream_batch(path, "s", 2)
    assert staged_files(path) == [] and len(engine_rows(path, "pub")) == 13


def test_a_failing_task_deletes_its_own_staging(tmp_path):
    path = str(tmp_path / "data")
    with kafkalog.LogStore(path, maintenance=False) as store:
        store.create_topic("pub", partitions=2)
    with pytest.raises(kafkalog.errors.UnknownTopicOrPartitionError, match="partition 5 of topic 'pub'"):
        _stage(path, "s", 0, [b"ok", b"ok", b"bad"], [0, 1, 5])
    assert staged_files(path) == []
    shutil.rmtree(path)
