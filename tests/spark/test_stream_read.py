"""Streaming reads: availableNow runs restarted from the checkpoint (exact record sets each time), rate limits,
topics that appear while running, data loss between runs; and the stream reader's admission control driven
directly (no query), where a clock decides."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

import kafkalog  # noqa: E402
from kafkalog.spark.source import KafkaLogDataSource, kafka_schema  # noqa: E402

from .conftest import T0, run_available_now, spark_rows, write_records  # noqa: E402


def stream(spark, path, **options):
    reader = spark.readStream.format("kafkalog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(path))


def run(spark, df, ckpt, name, headers=False):
    """One availableNow run; returns (rows read by this run, row count of each non-empty micro-batch)."""
    seen = []

    def each(batch, batch_id):
        seen.append((batch_id, spark_rows(batch, headers)))

    run_available_now(df.writeStream.foreachBatch(each).queryName(name).option("checkpointLocation", str(ckpt)))
    rows = sorted((r for _, b in seen for r in b), key=lambda t: (t[2], t[3], t[4]))
    return rows, [len(b) for _, b in sorted(seen) if b]


def plain(rows):
    return sorted((r[:7] for r in rows), key=lambda t: (t[2], t[3], t[4]))


def test_available_now_restarts_from_the_checkpoint_with_exact_records(spark, tmp_path):
    path, ckpt = tmp_path / "data", tmp_path / "ckpt"
    first = write_records(path, "s1a", 2, 10)
    df = stream(spark, path, subscribePattern="s1.*", startingOffsets="earliest", includeHeaders="true")
    got, _ = run(spark, df, ckpt, "s1_run", headers=True)
    assert got == sorted(first, key=lambda t: (t[2], t[3], t[4]))
    # more records, and a topic that appears while the query is stopped: read from its earliest offset
    more = write_records(path, "s1a", 2, 5) + write_records(path, "s1b", 2, 4)
    got, _ = run(spark, df, ckpt, "s1_run", headers=True)
    assert got == sorted(more, key=lambda t: (t[2], t[3], t[4]))  # nothing lost, nothing read twice
    assert [(r[2], r[3], r[4]) for r in got] == [("s1a", p, o) for p in (0, 1) for o in range(10, 15)] + \
        [("s1b", p, o) for p in (0, 1) for o in range(4)]
    offsets_file = max((p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert json.loads(offsets_file.read_text().splitlines()[-1]) == {"s1a": {"0": 15, "1": 15},
                                                                     "s1b": {"0": 4, "1": 4}}


def test_data_loss_between_runs(spark, tmp_path):
    path, ckpt = tmp_path / "data", tmp_path / "ckpt"
    rows = write_records(path, "dl", 1, 10)
    got, _ = run(spark, stream(spark, path, subscribe="dl", startingOffsets="earliest"), ckpt, "dl_run")
    assert got == plain(rows)
    rows = write_records(path, "dl", 1, 10)
    with kafkalog.LogStore(path, maintenance=False) as store:
        assert store.log("dl", 0).delete_records_before(15) == 15
    with pytest.raises(Exception, match=r"Cannot read offsets \[10, 15\) of dl-0: the log starts at offset 15"):
        run(spark, stream(spark, path, subscribe="dl"), ckpt, "dl_run")
    got, _ = run(spark, stream(spark, path, subscribe="dl", failOnDataLoss="false"), ckpt, "dl_run")
    assert got == plain([r for r in rows if r[4] >= 15])  # the lost range is skipped, the rest read once


# ---------------------------------------------------------------------------------------------------- no query


def _reader(path, **options):
    return KafkaLogDataSource(dict(path=str(path), **options)).streamReader(kafka_schema(False))


def test_min_offsets_per_trigger_waits_for_records_or_the_delay(tmp_path):
    path = tmp_path / "data"
    write_records(path, "mo", 2, 1)
    r = _reader(path, subscribe="mo", minOffsetsPerTrigger="5", maxTriggerDelay="1h", startingOffsets="earliest")
    assert r.getDefaultReadLimit() == ReadMinRows(5)
    start = r.initialOffset()
    assert start == {"mo": {"0": 0, "1": 0}}
    first = r.latestOffset(start, ReadMinRows(5))
    assert first == {"mo": {"0": 1, "1": 1}}  # the first batch is never held back
    write_records(path, "mo", 2, 1)
    assert r.latestOffset(first, ReadMinRows(5)) == first  # 2 new records < 5: wait
    write_records(path, "mo", 1, 3)
    assert r.latestOffset(first, ReadMinRows(5)) == {"mo": {"0": 5, "1": 2}}
    assert r.reportLatestOffset() == {"mo": {"0": 5, "1": 2}}
    eager = _reader(path, subscribe="mo", minOffsetsPerTrigger="5", maxTriggerDelay="0s")
    assert eager.latestOffset(first, ReadMinRows(5)) == {"mo": {"0": 5, "1": 2}}
    assert eager.latestOffset(first, ReadMinRows(5)) == {"mo": {"0": 5, "1": 2}}  # the delay always passed


def test_rate_limit_available_now_target_and_initial_offset(tmp_path):
    path = tmp_path / "data"
    write_records(path, "rl", 2, 10)
    r = _reader(path, subscribe="rl", maxOffsetsPerTrigger="5", startingOffsets="latest")
    assert r.getDefaultReadLimit() == ReadMaxRows(5)
    start = {"rl": {"0": 0, "1": 6}}
    assert r.latestOffset(start, ReadMaxRows(5)) == {"rl": {"0": 3, "1": 7}}  # 10 and 4 available: floor(3.57), 1
    assert r.latestOffset(start, ReadAllAvailable()) == {"rl": {"0": 10, "1": 10}}
    initial = r.initialOffset()
    write_records(path, "rl", 2, 1)
    assert r.initialOffset() == initial == {"rl": {"0": 10, "1": 10}}  # Spark asks twice: one answer
    r.prepareForTriggerAvailableNow()
    write_records(path, "rl", 2, 1)
    assert r.latestOffset(initial, ReadAllAvailable()) == {"rl": {"0": 11, "1": 11}}  # not past the target
    parts = r.partitions({"rl": {"0": 10}}, {"rl": {"0": 11, "1": 11}})  # rl-1 is new: from its log start
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [("rl", 0, 10, 11), ("rl", 1, 0, 11)]


def test_stream_start_positions_and_options_checked_when_the_query_starts(tmp_path):
    path = tmp_path / "data"
    write_records(path, "sp", 2, 10)
    assert _reader(path, subscribe="sp").initialOffset() == {"sp": {"0": 10, "1": 10}}  # latest by default
    at = _reader(path, subscribe="sp", startingTimestamp=str(T0 + 6500))
    assert at.initialOffset() == {"sp": {"0": 7, "1": 7}}
    parts = at.partitions(at.initialOffset(), at.latestOffset(at.initialOffset(), ReadAllAvailable()))
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [("sp", 0, 7, 10), ("sp", 1, 7, 10)]
    for option, message in (("endingOffsets", "ending offset not valid in streaming queries"),
                            ("endingTimestamp", "ending timestamp not valid in streaming queries")):
        with pytest.raises(ValueError, match=message):
            _reader(path, subscribe="sp", **{option: "latest" if option == "endingOffsets" else str(T0)})
