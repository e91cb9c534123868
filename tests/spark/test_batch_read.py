"""Batch reads through a real local Spark session: every Spark-Kafka option against records the engine wrote with
known offsets, keys, headers and timestamps."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import kafkalog  # noqa: E402
from kafkalog.spark.source import kafka_schema  # noqa: E402

from .conftest import T0, spark_rows, write_records  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("batch") / "data"
    rows = {
        "events": write_records(path, "events", 3, 20),
        "other": write_records(path, "other", 1, 7, compression="lz4"),
        "lossy": write_records(path, "lossy", 2, 10),
        "appendtime": write_records(path, "appendtime", 1, 3, config={"message.timestamp.type": "LogAppendTime"}),
    }
    with kafkalog.LogStore(path, maintenance=False) as store:
        store.log("lossy", 0).delete_records_before(4)
    return path, rows


def read(spark, path, **options):
    reader = spark.read.format("kafkalog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(path))


def plain(rows):
    """Expected rows without headers, sorted like spark_rows."""
    return sorted((r[:7] for r in rows), key=lambda t: (t[2], t[3], t[4]))


def offsets(rows):
    return sorted((r[2], r[3], r[4]) for r in rows)


def test_every_record_with_sparks_kafka_schema_and_headers(spark, data):
    path, rows = data
    df = read(spark, path, subscribe="events", includeHeaders="true")
    assert df.schema == kafka_schema(True)
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int,"
                                        "headers:array<struct<key:string,value:binary>>>")
    got = spark_rows(df, headers=True)
    assert got == sorted(rows["events"], key=lambda t: (t[2], t[3], t[4]))
    assert sum(1 for r in got if r[0] is None) == 12 and sum(1 for r in got if r[7]) == 21


def test_compressed_batches_log_append_time_and_no_headers(spark, data):
    path, rows = data
    df = read(spark, path, subscribe="other,appendtime")
    assert df.schema == kafka_schema(False)
    got = spark_rows(df)
    assert [r for r in got if r[2] == "other"] == plain(rows["other"])
    appended = [r for r in got if r[2] == "appendtime"]
    assert [r[4] for r in appended] == [0, 1, 2]
    assert {r[6] for r in appended} == {1}  # LogAppendTime: the broker's clock, not the producer's
    assert all(r[5] > T0 + 10_000 for r in appended)


def test_subscribe_pattern_is_a_full_match_and_assign_takes_named_partitions(spark, data):
    path, rows = data
    by_topic = dict(read(spark, path, subscribePattern="(events|oth.*)").groupBy("topic").count().collect())
    assert by_topic == {"events": 60, "other": 7}
    assert read(spark, path, subscribePattern="vent").count() == 0  # Java's matches(): the whole name
    got = spark_rows(read(spark, path, assign='{"events":[2],"other":[0]}'))
    assert got == plain([r for r in rows["events"] if r[3] == 2] + rows["other"])


def test_starting_and_ending_offsets_json(spark, data):
    path, _ = data
    df = read(spark, path, subscribe="events", startingOffsets='{"events":{"0":3,"1":-2,"2":10}}',
              endingOffsets='{"events":{"0":7,"1":-1,"2":12}}')
    want = [("events", 0, o) for o in range(3, 7)] + [("events", 1, o) for o in range(20)] + \
           [("events", 2, o) for o in range(10, 12)]
    assert offsets(spark_rows(df)) == want


def test_time_seek_with_global_timestamps(spark, data):
    path, rows = data
    df = read(spark, path, subscribe="events", startingTimestamp=str(T0 + 5500), endingTimestamp=str(T0 + 9000))
    got = spark_rows(df)
    assert got == plain([r for r in rows["events"] if T0 + 5500 <= r[5] < T0 + 9000])
    assert offsets(got) == [("events", p, o) for p in range(3) for o in (6, 7, 8)]


def test_time_seek_per_partition_and_no_match_strategy(spark, data):
    path, _ = data
    start = f'{{"events":{{"0":{T0},"1":{T0 + 12_000},"2":{T0 + 99_000}}}}}'
    end = f'{{"events":{{"0":{T0 + 2_000},"1":{T0 + 99_000},"2":{T0 + 99_000}}}}}'
    with pytest.raises(Exception, match=r"No offset matched from request of topic-partition events-2 and timestamp"):
        read(spark, path, subscribe="events", startingOffsetsByTimestamp=start, endingOffsetsByTimestamp=end).count()
    df = read(spark, path, subscribe="events", startingOffsetsByTimestamp=start, endingOffsetsByTimestamp=end,
              startingOffsetsByTimestampStrategy="latest")
    assert offsets(spark_rows(df)) == [("events", 0, 0), ("events", 0, 1)] + [("events", 1, o) for o in range(12, 20)]


def test_min_partitions_and_max_records_per_partition_split_ranges(spark, data):
    path, rows = data
    want = plain(rows["events"])
    for options, tasks in (({"minPartitions": "7"}, 6), ({"maxRecordsPerPartition": "6"}, 12),
                           ({"maxRecordsPerPartition": "10", "minPartitions": "9"}, 12)):
        df = read(spark, path, subscribe="events", **options)
        assert df.rdd.getNumPartitions() == tasks, options
        assert spark_rows(df) == want, options


def test_fail_on_data_loss(spark, data):
    path, rows = data
    start = '{"lossy":{"0":1,"1":0}}'
    with pytest.raises(Exception, match=r"startingOffsets for lossy-0 was 1 but the log starts at offset 4"):
        read(spark, path, subscribe="lossy", startingOffsets=start).count()
    got = spark_rows(read(spark, path, subscribe="lossy", startingOffsets=start, failOnDataLoss="false"))
    assert got == plain([r for r in rows["lossy"] if r[3] == 1 or r[4] >= 4])
    # earliest is the log start offset: nothing is lost
    assert read(spark, path, subscribe="lossy", **{"kafka.bootstrap.servers": "ignored:9092",
                                                    "kafka.group.id": "ignored"}).count() == 16


def test_missing_topic_reads_nothing(spark, data):
    path, _ = data
    df = read(spark, path, subscribe="nope")
    assert df.count() == 0 and df.schema == kafka_schema(False)


@pytest.mark.parametrize("options, schema, message", [
    ({"subscribe": "events", "bogus": "1"}, None, r"unknown option 'bogus' for the kafkalog source"),
    ({"subscribe": "events"}, "value string",
     r"kafkalog source has a fixed schema and cannot be set with a custom one"),
    ({"subscribe": "events", "kafka.auto.offset.reset": "earliest"}, None,
     r"Kafka option 'auto.offset.reset' is not supported"),
    ({"subscribe": "events", "startingOffsets": "latest"}, None,
     r"starting offset can't be latest for batch queries on kafkalog"),
    ({"assign": '{"events":[7]}'}, None, r"partition events-7 does not exist"),
])
def test_rejected_at_planning(spark, data, options, schema, message):
    path, _ = data
    reader = spark.read.format("kafkalog")
    if schema:
        reader = reader.schema(schema)
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load(str(path)).count()


def test_path_is_required(spark):
    with pytest.raises(Exception, match=r"option 'path' must be specified"):
        spark.read.format("kafkalog").option("subscribe", "events").option("kafka.bootstrap.servers", "h:9092").load()


def test_a_compacted_topic_reads_its_latest_records_across_holes(spark, tmp_path):
    path = tmp_path / "data"
    latest = {}
    with kafkalog.LogStore(path, maintenance=False) as store:
        store.create_topic("table", 2, {"cleanup.policy": "compact", "segment.bytes": 2000})
        for p in range(2):
            log = store.log("table", p)
            for i in range(600):
                key = f"k{i % 9}".encode()
                latest[(p, key)] = (log.append(f"{p}:{i}".encode(), key=key, timestamp=T0 + i), T0 + i)
            log.roll()
            assert log.run_cleaner(force=True).records_removed == 591
    want = sorted((k, f"{p}:{ts - T0}".encode(), "table", p, off, ts, 0) for (p, k), (off, ts) in latest.items())
    got = spark_rows(read(spark, path, subscribe="table"))
    assert sorted(got) == want
    # a range that starts and ends inside holes, split into more tasks than it has records
    got = spark_rows(read(spark, path, subscribe="table", minPartitions="8",
                          startingOffsets='{"table": {"0": 100, "1": 0}}',
                          endingOffsets='{"table": {"0": 596, "1": 595}}'))
    assert sorted(got) == [w for w in want if (w[3] == 0 and 100 <= w[4] < 596) or (w[3] == 1 and w[4] < 595)]
