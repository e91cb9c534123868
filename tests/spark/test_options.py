"""Spark-Kafka options, range splitting and rate limiting: pure functions, no Spark session (and no pyspark)."""

from __future__ import annotations

import pytest

from kafkalog.errors import InvalidConfigError
from kafkalog.spark.offsets import rate_limit, split_ranges
from kafkalog.spark.options import (
    OffsetSpec,
    check_batch,
    check_stream,
    parse_read_options,
    parse_write_options,
    time_string_ms,
)


def opts(**kw):
    kw.setdefault("path", "/data")
    return parse_read_options(kw)


def test_defaults_and_case_insensitive_keys():
    o = parse_read_options({"PATH": "file:///data", "Subscribe": " a, b ,a,", "INCLUDEHEADERS": "TRUE"})
    assert (o.path, o.strategy, o.topics, o.include_headers) == ("/data", "subscribe", ("a", "b"), True)
    assert (o.starting, o.ending, o.fail_on_data_loss, o.max_trigger_delay_ms) == (None, None, True, 900_000)
    o = opts(assign='{"t":[1,0],"u":[0]}', startingOffsets='{"t":{"0":5,"1":-2},"u":{"0":-1}}',
             endingOffsets="LATEST", maxTriggerDelay="30s", minPartitions="4", maxRecordsPerPartition="100",
             failOnDataLoss="false", startingOffsetsByTimestampStrategy="Latest")
    assert o.assigned == (("t", 0), ("t", 1), ("u", 0))
    assert o.starting == OffsetSpec("offsets", {("t", 0): 5, ("t", 1): -2, ("u", 0): -1})
    assert o.ending == OffsetSpec("latest")
    assert (o.max_trigger_delay_ms, o.min_partitions, o.max_records_per_partition) == (30_000, 4, 100)
    assert (o.fail_on_data_loss, o.no_match_latest) == (False, True)


def test_timestamp_precedence_like_spark():
    o = opts(subscribe="t", startingTimestamp="1000", startingOffsetsByTimestamp='{"t":{"0":5}}',
             startingOffsets="earliest", endingOffsetsByTimestamp='{"t":{"0":9}}', endingOffsets="latest")
    assert o.starting == OffsetSpec("timestamp", timestamp=1000)
    assert o.ending == OffsetSpec("timestamps", {("t", 0): 9})


def test_kafka_options_are_accepted_and_ignored():
    o = opts(subscribe="t", **{"kafka.bootstrap.servers": "h:9092", "kafka.group.id": "g", "groupIdPrefix": "x",
                               "kafkaConsumer.pollTimeoutMs": "5", "fetchOffset.numRetries": "3"})
    assert o.strategy == "subscribe"


@pytest.mark.parametrize("kw, message", [
    ({"subscribe": "t", "bogus": "1"}, r"unknown option 'bogus' for the kafkalog source; known options: assign,"),
    ({"subscribe": "t", "topic": "x"}, r"unknown option 'topic' for the kafkalog source \(it is a sink option\)"),
    ({}, r"One of the following options must be specified for kafkalog source: assign, subscribe, "
         r"subscribePattern\. See the docs for more details\."),
    ({"subscribe": "t", "subscribePattern": "t.*"}, r"Only one of the following options can be specified"),
    ({"assign": "t"}, r"No topicpartitions to assign as specified value for option 'assign' is 't'"),
    ({"assign": '{"t":["0"]}'}, r"option 'assign': expected e\.g\. \{\"topicA\":\[0,1\]"),
    ({"subscribe": " , "}, r"No topics to subscribe to as specified value for option 'subscribe' is ' , '"),
    ({"subscribePattern": " "}, r"Pattern to subscribe is empty"),
    ({"subscribePattern": "("}, r"option 'subscribePattern': invalid regular expression"),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"},
     r"Kafka option 'auto.offset.reset' is not supported.\nInstead set the source option 'startingOffsets'"),
    ({"subscribe": "t", "kafka.key.deserializer": "x"}, r"Kafka option 'key.deserializer' is not supported as keys"),
    ({"subscribe": "t", "kafka.value.deserializer": "x"}, r"Kafka option 'value.deserializer' is not supported"),
    ({"subscribe": "t", "kafka.enable.auto.commit": "x"}, r"Kafka option 'enable.auto.commit' is not supported"),
    ({"subscribe": "t", "kafka.interceptor.classes": "x"}, r"Kafka option 'interceptor.classes' is not supported"),
    ({"subscribe": "t", "minPartitions": "0"}, r"minPartitions must be positive"),
    ({"subscribe": "t", "maxRecordsPerPartition": "-1"}, r"maxRecordsPerPartition must be positive"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "x"}, r"option 'maxOffsetsPerTrigger' must be an integer"),
    ({"subscribe": "t", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
     r"The value of minOffsetPerTrigger\(10\) is higher than the maxOffsetsPerTrigger\(5\)\."),
    ({"subscribe": "t", "failOnDataLoss": "yes"}, r"option 'failOnDataLoss' must be true or false, got 'yes'"),
    ({"subscribe": "t", "startingTimestamp": "soon"}, r"Expected a single long value, got soon"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, r"offset -3 for t-0 is not valid"),
    ({"subscribe": "t", "endingOffsets": '{"t":[0]}'}, r"option 'endingOffsets': expected e\.g\."),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "skip"}, r"must be 'error' or 'latest'"),
    ({"subscribe": "t", "maxTriggerDelay": "5 weeks"}, r"invalid time string '5 weeks'"),
])
def test_rejected_with_sparks_words(kw, message):
    with pytest.raises(InvalidConfigError, match=message):
        opts(**kw)


def test_path_is_required():
    with pytest.raises(InvalidConfigError, match=r"option 'path' must be specified.*kafka\.bootstrap\.servers"):
        parse_read_options({"subscribe": "t", "kafka.bootstrap.servers": "h:9092"})


@pytest.mark.parametrize("kw, message", [
    ({"startingOffsets": "latest"}, r"starting offset can't be latest for batch queries on kafkalog"),
    ({"startingOffsets": '{"t":{"0":-1}}'}, r"startingOffsets for t-0 can't be latest for batch queries"),
    ({"endingOffsets": "earliest"}, r"ending offset can't be earliest for batch queries on kafkalog"),
    ({"endingOffsets": '{"t":{"0":-2}}'}, r"ending offset for t-0 can't be earliest for batch queries"),
    ({"startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"0":4}}'},
     r"The starting offset \(5\) for t-0 is greater than the ending offset \(4\)"),
    ({"startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"u":{"0":9}}'},
     r"The topic-partitions of the starting and ending offsets differ: start \[t-0\], end \[u-0\]"),
])
def test_batch_only_checks(kw, message):
    with pytest.raises(InvalidConfigError, match=message):
        check_batch(opts(subscribe="t", **kw))
    check_stream(opts(subscribe="t", **{k: v for k, v in kw.items() if k.startswith("starting")}))


def test_stream_only_checks():
    for key in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
        value = "latest" if key == "endingOffsets" else ('{"t":{"0":1}}' if "By" in key else "1")
        with pytest.raises(InvalidConfigError, match=r"ending (offset|timestamp) not valid in streaming queries"):
            check_stream(opts(subscribe="t", **{key: value}))


def test_sink_options():
    w = parse_write_options({"path": "/d", "topic": " out ", "kafka.acks": "all", "sinkId": "daily-copy",
                             "checkpointLocation": "/c"})
    assert (w.path, w.topic, w.sink_id, w.checkpoint_location) == ("/d", "out", "daily-copy", "/c")
    with pytest.raises(InvalidConfigError, match=r"unknown option 'subscribe' for the kafkalog sink \(it is a source"):
        parse_write_options({"path": "/d", "subscribe": "t"})
    with pytest.raises(InvalidConfigError, match=r"Kafka option 'key.serializer' is not supported"):
        parse_write_options({"path": "/d", "kafka.key.serializer": "x"})
    with pytest.raises(InvalidConfigError, match=r"option 'sinkId' must be"):
        parse_write_options({"path": "/d", "sinkId": "a/b"})


def test_time_strings():
    assert [time_string_ms(t) for t in ("250", "250ms", "2s", "3m", "3min", "1h", "1d", "1500us")] == \
        [250, 250, 2000, 180_000, 180_000, 3_600_000, 86_400_000, 1]


def test_split_ranges_like_sparks_range_calculator():
    ranges = [("t", 0, 0, 100), ("t", 1, 0, 10), ("t", 2, 5, 5)]
    assert split_ranges(ranges, None, None) == [("t", 0, 0, 100), ("t", 1, 0, 10)]  # empty ranges dropped
    assert split_ranges(ranges, 2, None) == [("t", 0, 0, 100), ("t", 1, 0, 10)]  # enough tasks already
    # 110 records over 4 tasks: t-1 (round(10/110*4) = 0 -> 1) stays whole, t-0 takes the other 3
    assert split_ranges(ranges, 4, None) == [("t", 0, 0, 33), ("t", 0, 33, 66), ("t", 0, 66, 100),
                                             ("t", 1, 0, 10)]
    assert split_ranges(ranges, None, 40) == [("t", 0, 0, 33), ("t", 0, 33, 66), ("t", 0, 66, 100),
                                              ("t", 1, 0, 10)]
    pieces = split_ranges([("t", 0, 0, 60)], 9, 10)  # 6 pieces of 10, then each in two for minPartitions
    assert len(pieces) == 12 and all(r[3] - r[2] == 5 for r in pieces)
    assert [r[2] for r in pieces] == list(range(0, 60, 5))


def test_rate_limit_spreads_in_proportion_without_starving():
    assert rate_limit(10, {"a": 0, "b": 0}, {"a": 100, "b": 10}, {}) == {"a": 9, "b": 1}
    assert rate_limit(3, {"a": 0, "b": 0, "c": 0}, {"a": 1000, "b": 1, "c": 0}, {}) == {"a": 2, "b": 1, "c": 0}
    assert rate_limit(4, {"a": 5}, {"a": 9, "n": 4}, {"n": 2}) == {"a": 7, "n": 3}  # new: from its earliest
    assert rate_limit(100, {"a": 5}, {"a": 5}, {}) == {"a": 5}
