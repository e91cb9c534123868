"""KafkaProducer on real files, with kafka-python as the oracle where its behaviour is defined without a broker
(partitioner, murmur2, serializers, RecordMetadata shape), and a second process for shared-mode offsets."""

import inspect
import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest
from kafka.consumer.fetcher import ConsumerRecord as KafkaConsumerRecord
from kafka.partitioner import DefaultPartitioner as KafkaDefaultPartitioner
from kafka.partitioner import StickyPartitioner as KafkaStickyPartitioner
from kafka.partitioner import murmur2 as kafka_murmur2
from kafka.producer.future import RecordMetadata as KafkaRecordMetadata
from kafka.serializer import JsonSerializer

import kafkalog
from kafkalog._engine.accumulator import ProducerBatch
from kafkalog._engine.batch import build_batch, iter_batches
from kafkalog.client.partitioner import StickyPartitioner, hash_partition, murmur2
from kafkalog.client.producer import IGNORED_CONFIGS, FutureRecordMetadata, KafkaProducer
from kafkalog.errors import (
    InvalidConfigError,
    InvalidTimestampError,
    InvalidTopicError,
    LogClosedError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from kafkalog.structs import ConsumerRecord, RecordMetadata, TopicPartition

LONG = 60_000  # a linger no test waits for: batches leave on batch_size or flush() only


class Cluster:
    """The slice of kafka-python's ClusterMetadata its partitioners read."""

    def __init__(self, topic, n):
        self._topic, self._n = topic, n

    def topics(self, exclude_internal_topics=True):
        return {self._topic}

    def partitions_for_topic(self, topic):
        return set(range(self._n))

    available_partitions_for_topic = partitions_for_topic


def all_records(store, topic):
    """{partition: [records]} read back through the log."""
    return {p: list(store.log(topic, p).records()) for p in range(store.partitions_for(topic))}


def batches(store, topic, partition=0):
    return list(iter_batches(store.log(topic, partition).read(0, 10**9)))


def partition_of(future):
    return future.get(timeout=10).partition


# ---------------------------------------------------------------------------------------------------- value types

def test_record_metadata_and_consumer_record_fields_match_kafka_python():
    assert RecordMetadata._fields == KafkaRecordMetadata._fields
    assert ConsumerRecord._fields == KafkaConsumerRecord._fields
    assert kafkalog.structs.TopicPartition is TopicPartition


def test_future_resolves_to_record_metadata_in_kafka_python_order(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, acks=1)
    md = p.send("t", b"value", key=b"key", headers=[("h1", b"ab"), ("h2", b"")], timestamp_ms=1234).get(timeout=5)
    assert type(md) is RecordMetadata
    assert md == ("t", 0, TopicPartition("t", 0), 0, 1234, None, 3, 5, 2 + 2 + 2 + 0)
    # kafka-python's own size formula for headers
    assert md.serialized_header_size == sum(len(k.encode()) + len(v) for k, v in [("h1", b"ab"), ("h2", b"")])
    md = p.send("t", b"v").get(timeout=5)
    assert (md.offset, md.serialized_key_size, md.serialized_header_size) == (1, -1, -1)
    p.close()


# ---------------------------------------------------------------------------------------------------- partitioner

def test_murmur2_matches_java_vectors_and_kafka_python():
    def signed(h):
        return h - (1 << 32) if h >= 1 << 31 else h
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    java = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
            b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    for key, expected in java.items():
        assert signed(murmur2(key)) == expected, key
    rnd = random.Random(480)
    for _ in range(5000):
        key = rnd.randbytes(rnd.randrange(0, 80))
        assert murmur2(key) == kafka_murmur2(key), key
        assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == kafka_murmur2(key)


def test_key_partition_matches_kafka_python_default_partitioner():
    rnd = random.Random(7)
    kp = KafkaDefaultPartitioner()
    for _ in range(5000):
        key = rnd.randbytes(rnd.randrange(1, 40))
        n = rnd.randrange(1, 200)
        assert hash_partition(key, n) == kp.partition("t", key, key, None, None, Cluster("t", n)), (key, n)


def test_producer_sends_keyed_records_where_kafka_python_would(open_store):
    store = open_store()
    rnd = random.Random(11)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    kp = KafkaDefaultPartitioner()
    for n in (1, 2, 3, 7, 12, 31, 64):
        store.create_topic(f"keyed{n}", n)
        keys = [rnd.randbytes(rnd.randrange(1, 24)) for _ in range(300)]
        futures = [p.send(f"keyed{n}", b"v", key=k) for k in keys]
        p.flush()
        got = [f.get().partition for f in futures]
        assert got == [kp.partition(f"keyed{n}", k, k, b"v", b"v", Cluster(f"keyed{n}", n)) for k in keys]
        # and the records really are in those partitions
        recs = all_records(store, f"keyed{n}")
        for f, k in zip(futures, keys):
            md = f.get()
            assert recs[md.partition][md.offset].key == k
    p.close()


def test_unkeyed_records_stick_to_a_partition_until_its_batch_is_sent(open_store):
    store = open_store()
    store.create_topic("s", 4)
    # 100-byte values cost 112 bytes of batch_size: 8 fit in 1000, the 9th opens a batch elsewhere (KIP-480)
    p = KafkaProducer(store, linger_ms=LONG, batch_size=1000, acks=1)
    futures = [p.send("s", b"x" * 100) for _ in range(80)]
    p.flush()
    parts = [partition_of(f) for f in futures]
    runs = []
    for q in parts:
        if runs and runs[-1][0] == q:
            runs[-1][1] += 1
        else:
            runs.append([q, 1])
    assert [length for _, length in runs] == [8] * 10
    assert len({q for q, _ in runs}) > 1
    for q in range(4):
        assert all(b.record_count == 8 for b in batches(store, "s", q))
    p.close()


def test_unkeyed_records_move_on_after_every_send_without_linger(open_store):
    store = open_store()
    store.create_topic("s", 3)
    p = KafkaProducer(store, acks=1)
    parts = [partition_of(p.send("s", b"x")) for _ in range(30)]
    assert all(a != b for a, b in zip(parts, parts[1:]))  # every send is a batch of its own
    store.create_topic("single", 1)
    assert {partition_of(p.send("single", b"x")) for _ in range(5)} == {0}
    p.close()


def test_kafka_python_partitioners_plug_in(open_store):
    store = open_store()
    store.create_topic("k", 5)
    rnd = random.Random(3)
    p = KafkaProducer(store, partitioner=KafkaDefaultPartitioner(), acks=1)
    keys = [rnd.randbytes(8) for _ in range(100)]
    assert [partition_of(p.send("k", b"v", key=k)) for k in keys] == [hash_partition(k, 5) for k in keys]
    p.close()
    for sticky in (KafkaStickyPartitioner(), StickyPartitioner()):
        p = KafkaProducer(store, partitioner=sticky, linger_ms=LONG, batch_size=1000, acks=1)
        futures = [p.send("k", b"x" * 100) for _ in range(40)]
        p.flush()
        parts = [partition_of(f) for f in futures]
        changes = sum(a != b for a, b in zip(parts, parts[1:]))
        assert 3 <= changes <= 5, parts  # a move per sent batch (8 records), not per record
        p.close()


def test_explicit_partition_outside_the_topic_is_refused(open_store):
    store = open_store()
    store.create_topic("t", 2)
    p = KafkaProducer(store, acks=1)
    assert partition_of(p.send("t", b"v", partition=1)) == 1
    for bad in (2, -1, 99):
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("t", b"v", partition=bad)
    assert store.log("t", 0).log_end_offset + store.log("t", 1).log_end_offset == 1
    p.close()


# ---------------------------------------------------------------------------------------------------- serializers

def test_serializers_are_applied_like_kafka_python(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, key_serializer=str.encode, value_serializer=JsonSerializer(), acks=1)
    md = p.send("t", {"a": [1, 2]}, key="k1", headers=[("h", b"1")]).get()
    assert md.serialized_value_size == len(JsonSerializer().serialize("t", [], {"a": [1, 2]}))
    p.close()
    calls = []

    def value_ser(v):
        calls.append(v)
        return json.dumps(v).encode()
    p = KafkaProducer(store, value_serializer=value_ser, acks=1)
    # kafka-python calls a serializer for None too (SerializeWrapper): json's None is b"null"
    p.send("t", None, key=b"k2").get()
    p.close()
    recs = list(store.log("t", 0).records())
    assert [(r.key, r.value) for r in recs] == [(b"k1", b'{"a": [1, 2]}'), (b"k2", b"null")]
    assert calls == [None]


def test_a_failing_serializer_fails_only_that_send(open_store):
    store = open_store()
    store.create_topic("t", 1)

    def ser(v):
        if v == "bad":
            raise ValueError("cannot serialize")
        return v.encode()
    p = KafkaProducer(store, value_serializer=ser, linger_ms=LONG, acks=1)
    f1 = p.send("t", "a")
    with pytest.raises(ValueError, match="cannot serialize"):
        p.send("t", "bad")
    f2 = p.send("t", "b")
    p.flush()
    assert (f1.get().offset, f2.get().offset) == (0, 1)
    assert [r.value for r in store.log("t", 0).records()] == [b"a", b"b"]
    p.close()


def test_send_argument_errors_match_kafka_python(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, acks=1)
    with pytest.raises(ValueError, match="key or value"):
        p.send("t")
    with pytest.raises(TypeError):
        p.send("t", "not bytes")
    with pytest.raises(TypeError):
        p.send("t", b"v", key=12)
    with pytest.raises(TypeError):
        p.send("t", b"v", headers=[("h", "not bytes")])
    with pytest.raises(TypeError):
        p.send("t", b"v", headers=[(b"key must be str", b"v")])
    with pytest.raises(InvalidTimestampError):
        p.send("t", b"v", timestamp_ms=-5)
    with pytest.raises(InvalidTopicError):
        p.send("bad topic!", b"v")
    assert store.log("t", 0).log_end_offset == 0
    p.close()
    with pytest.raises(LogClosedError):
        p.send("t", b"v")


# ---------------------------------------------------------------------------------------------------- futures

def test_callbacks_errbacks_and_future_state(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, acks=1, max_request_size=1000)
    got, errs, both = [], [], []
    f = p.send("t", b"v1")
    assert not f.is_done and f.value is None and f.exception is None and not f.succeeded() and not f.failed()
    f.add_callback(got.append).add_errback(errs.append)
    f.add_callback(lambda tag, md: got.append((tag, md.offset)), "tagged")
    f.add_both(both.append)
    big = p.send("t", b"x" * 2000)  # over max_request_size: fails at once, alone
    big.add_errback(errs.append)
    big.add_callback(got.append)
    assert big.is_done and big.failed() and isinstance(big.exception, RecordTooLargeError)
    assert big.exception.code == 10 and big.value is None
    assert errs == [big.exception] and got == []
    with pytest.raises(RecordTooLargeError):
        big.get()
    p.flush()
    assert f.is_done and f.succeeded() and not f.failed() and f.exception is None
    assert got == [f.value, ("tagged", 0)] and both == [f.value]
    late = []
    f.add_callback(late.append)  # already done: runs at once, in this thread
    assert late == [f.value]
    f.add_callback(lambda md: 1 / 0)  # a failing callback is logged, not raised
    assert f.get() == f.value
    p.close()


def test_get_times_out_while_a_batch_lingers(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    f = p.send("t", b"v")
    t = time.monotonic()
    with pytest.raises(RequestTimedOutError):
        f.get(timeout=0.05)
    assert time.monotonic() - t < 5
    p.flush()
    assert f.get(timeout=0).offset == 0
    p.close()


def test_linger_expiry_sends_without_flush(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=20, acks=1)
    seen = threading.Event()
    f = p.send("t", b"v")
    f.add_callback(lambda md: seen.set())
    assert seen.wait(10) and f.get().offset == 0
    assert store.log("t", 0).log_end_offset == 1
    p.close()


def test_chain_resolves_a_kafka_python_future(open_store):
    from kafka.future import Future

    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, acks=1)
    other = Future()
    p.send("t", b"v").chain(other)
    assert other.succeeded() and other.value.offset == 0
    p.close()


# ---------------------------------------------------------------------------------------------------- write path

@pytest.mark.parametrize("cfg", [{"linger_ms": 0}, {"linger_ms": LONG}, {"linger_ms": 5, "batch_size": 300}])
def test_flush_makes_every_record_readable_as_sent(open_store, cfg):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, acks=1, **cfg)
    sent = []
    for i in range(50):
        key = None if i % 3 == 0 else b"k%d" % i
        value = None if i % 7 == 6 else b"value-%d" % i
        headers = [("n", b"%d" % i), ("empty", b"")] if i % 4 == 0 else None
        ts = 1_700_000_000_000 + i if i % 5 else None
        if key is None and value is None:
            value = b"v"
        sent.append((key, value, headers or [], ts, p.send("t", value, key=key, headers=headers, partition=0,
                                                          timestamp_ms=ts)))
    p.flush()
    recs = list(store.log("t", 0).records())
    assert len(recs) == 50
    for r, (key, value, headers, ts, f) in zip(recs, sent):
        md = f.get(timeout=0)
        assert (r.offset, r.key, r.value, r.headers) == (md.offset, key, value, headers)
        assert r.timestamp == md.timestamp
        if ts is not None:
            assert r.timestamp == ts
        else:
            assert abs(r.timestamp - time.time() * 1000) < 60_000
    p.close()


def test_linger_and_batch_size_make_fewer_larger_batches(open_store):
    store = open_store()
    for t in ("now", "batched", "big"):
        store.create_topic(t, 1)
    values = [b"%0100d" % i for i in range(600)]  # 100 B: 112 B of batch_size each
    for topic, cfg in (("now", {}), ("batched", {"linger_ms": LONG}), ("big", {"linger_ms": LONG,
                                                                                 "batch_size": 1 << 20})):
        p = KafkaProducer(store, acks=1, **cfg)
        for v in values:
            p.send(topic, v)
        p.flush()
        p.close()
    counts = {t: [b.record_count for b in batches(store, t)] for t in ("now", "batched", "big")}
    assert counts["now"] == [1] * 600  # linger_ms=0: one append per send
    assert counts["batched"] == [146] * 4 + [16]  # 16384 // 112 records per batch, the rest at flush
    assert counts["big"] == [600]
    for t in counts:
        assert [r.value for r in store.log(t, 0).records()] == values


@pytest.mark.parametrize("codec,codec_id", [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)])
def test_compression_type(open_store, codec, codec_id):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, compression_type=codec, linger_ms=LONG, acks=1)
    values = [b"%d" % i * 20 for i in range(100)]
    for v in values:
        p.send("t", v)
    p.flush()
    (batch,) = batches(store, "t")
    assert batch.compression == codec_id and batch.record_count == 100
    assert [r.value for r in store.log("t", 0).records()] == values
    p.close()


def test_too_large_record_fails_alone(open_store):
    store = open_store()
    store.create_topic("small", 1, {"max.message.bytes": 2000})
    for cfg in ({"linger_ms": 0}, {"linger_ms": LONG}):
        p = KafkaProducer(store, acks=1, **cfg)
        errs = []
        futures = [p.send("small", b"a" * 100), p.send("small", b"b" * 5000), p.send("small", b"c" * 100),
                   p.send("small", b"d" * 10**7)]  # the last is over max_request_size: refused before batching
        futures[1].add_errback(errs.append)
        p.flush()
        assert [f.succeeded() for f in futures] == [True, False, True, False]
        assert isinstance(futures[1].exception, RecordTooLargeError) and futures[1].exception.code == 10
        assert isinstance(futures[3].exception, RecordTooLargeError)
        assert errs == [futures[1].exception]
        assert futures[2].get().offset == futures[0].get().offset + 1
        p.close()
    assert [r.value[:1] for r in store.log("small", 0).records()] == [b"a", b"c", b"a", b"c"]


@pytest.mark.parametrize("compression", ["lz4", "zstd", "gzip", None])
def test_a_batch_larger_than_segment_bytes_is_split_and_every_future_resolves(open_store, compression):
    """A batch the log refuses as a whole (larger than the topic's segment.bytes, compressed or not) is split
    into batches that fit; flush() returns and every future resolves with its offset, in send order."""
    store = open_store()
    store.create_topic("tiny", 1, {"segment.bytes": 4096})
    p = KafkaProducer(store, acks="all", linger_ms=LONG, batch_size=1 << 20, compression_type=compression)
    values = [random.Random(i).randbytes(300) for i in range(60)]  # incompressible: ~18 KB > 4096
    futures = [p.send("tiny", v) for v in values]
    p.flush()
    assert all(f.is_done for f in futures)
    offsets = [f.get(timeout=5).offset for f in futures]
    assert offsets == list(range(60))
    assert [r.value for r in store.log("tiny", 0).records()] == values
    p.close()


def test_a_record_the_log_refuses_inside_a_batch_fails_alone(open_store):
    """message.timestamp.after.max.ms (1 h) refuses the whole batch in the log: the producer splits it so that only
    the record at fault fails and the others keep their order."""
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    future_ts = int(time.time() * 1000) + 10 * 3600 * 1000
    futures = [p.send("t", b"v%d" % i, timestamp_ms=future_ts if i == 5 else None) for i in range(12)]
    p.flush()
    assert [f.succeeded() for f in futures] == [i != 5 for i in range(12)]
    assert isinstance(futures[5].exception, InvalidTimestampError)
    assert [f.get().offset for i, f in enumerate(futures) if i != 5] == list(range(11))
    assert [r.value for r in store.log("t", 0).records()] == [b"v%d" % i for i in range(12) if i != 5]
    assert p.metrics()["producer-metrics"]["record-error-total"] == 1
    p.close()


def test_log_append_time_topic_reports_the_log_time(open_store):
    store = open_store()
    store.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    p = KafkaProducer(store, acks=1)
    md = p.send("lat", b"v", timestamp_ms=5).get()
    (rec,) = store.log("lat", 0).records()
    assert md.timestamp == rec.timestamp != 5 and rec.timestamp_type == 1
    p.close()


def test_large_values_are_not_pinned_by_futures(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    f = p.send("t", b"x" * 5000, key=b"k", headers=[("h", b"12")])
    p.flush()
    assert f._batch.dropped  # payload dropped once written; metadata keeps the sizes
    md = f.get()
    assert (md.serialized_key_size, md.serialized_value_size, md.serialized_header_size) == (1, 5000, 3)
    p.close()


# ---------------------------------------------------------------------------------------------------- durability

def test_acks_all_resolves_only_after_fsync(open_store):
    store = open_store()
    store.create_topic("t", 2)
    for cfg in ({}, {"linger_ms": 5}):
        p = KafkaProducer(store, **cfg)  # acks='all' is kafka-python's default
        assert p.config["acks"] == -1
        for i in range(20):
            md = p.send("t", b"v%d" % i, partition=i % 2).get(timeout=10)
            log = store.log("t", md.partition)
            assert log.recovery_point == log.log_end_offset > md.offset
        p.close()


def test_acks_1_resolves_before_fsync_and_acks_0_at_once(open_store):
    store = open_store()
    store.create_topic("t", 1)
    log = store.log("t", 0)
    p = KafkaProducer(store, acks=1)
    md = p.send("t", b"a").get(timeout=5)
    assert md.offset == 0 and log.log_end_offset == 1 and log.recovery_point == 0  # page cache only
    p.close()
    p = KafkaProducer(store, acks=0, linger_ms=LONG)
    f = p.send("t", b"b")
    assert f.is_done and f.succeeded() and f.get(timeout=0).offset == -1  # resolved before anything was written
    assert log.log_end_offset == 1
    p.flush()
    assert log.log_end_offset == 2
    p.close()


def test_flush_with_acks_all_fsyncs_everything_sent(open_store):
    store = open_store()
    store.create_topic("t", 3)
    p = KafkaProducer(store, linger_ms=LONG)
    futures = [p.send("t", b"v%d" % i) for i in range(300)]
    assert not any(f.is_done for f in futures)
    p.flush(timeout=30)
    assert all(f.succeeded() for f in futures)
    for q in range(3):
        log = store.log("t", q)
        assert log.recovery_point == log.log_end_offset
    assert sum(store.log("t", q).log_end_offset for q in range(3)) == 300
    p.close()


# ---------------------------------------------------------------------------------------------------- config

def test_config_keys_and_defaults_are_kafka_pythons():
    from kafka import KafkaProducer as KP

    for key in ("acks", "linger_ms", "batch_size", "compression_type", "max_request_size", "key_serializer",
                "value_serializer", "client_id", "allow_auto_create_topics", "transactional_id"):
        assert key in KP.DEFAULT_CONFIG
        if key not in ("client_id", "partitioner"):
            assert KafkaProducer.DEFAULT_CONFIG[key] == KP.DEFAULT_CONFIG[key], key
    # every kafka-python key is either used or explicitly ignored
    assert set(KP.DEFAULT_CONFIG) <= set(KafkaProducer.DEFAULT_CONFIG) | IGNORED_CONFIGS


def test_unknown_config_keys_are_refused_network_keys_ignored(open_store):
    store = open_store()
    with pytest.raises(InvalidConfigError, match="lingr_ms"):
        KafkaProducer(store, lingr_ms=5)
    with pytest.raises(InvalidConfigError, match="acks"):
        KafkaProducer(store, acks=2)
    with pytest.raises(InvalidConfigError, match="compression_type"):
        KafkaProducer(store, compression_type="brotli")
    with pytest.raises(InvalidConfigError, match="transactional_id"):
        KafkaProducer(store, transactional_id="")
    with pytest.raises(InvalidConfigError, match="acks"):  # Kafka: a transactional producer needs acks=all
        KafkaProducer(store, transactional_id="tx", acks=1)
    p = KafkaProducer(store, bootstrap_servers="kafka:9092", security_protocol="SSL", retries=5,
                      request_timeout_ms=1000, max_in_flight_requests_per_connection=1, enable_idempotence=False,
                      **{"linger.ms": 7, "batch.size": 100, "acks": "1"})
    assert (p.config["linger_ms"], p.config["batch_size"], p.config["acks"]) == (7, 100, 1)
    assert p.config["client_id"].startswith("kafkalog-producer-")
    p.close()


def test_auto_create_topics(open_store):
    store = open_store({"num.partitions": 3})
    p = KafkaProducer(store, acks=1)
    assert p.send("fresh", b"v").get().topic == "fresh"
    assert store.partitions_for("fresh") == 3 and p.partitions_for("fresh") == {0, 1, 2}
    assert p.partitions_for("made-by-metadata") == {0, 1, 2}
    p.close()
    for cfg in ({"allow_auto_create_topics": False}, {"auto_create_topics": False}):
        p = KafkaProducer(store, acks=1, **cfg)
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("missing", b"v")
        with pytest.raises(UnknownTopicOrPartitionError):
            p.partitions_for("missing")
        assert p.send("fresh", b"v").get().topic == "fresh"
        p.close()
    assert "missing" not in store.topics()


def test_path_opens_a_shared_store_and_close_releases_it(data_dir):
    p = KafkaProducer(data_dir, acks=1)
    assert p.store.mode == "shared"
    p.send("t", b"v").get(timeout=5)
    p.close()
    p.close()  # idempotent
    with kafkalog.LogStore(data_dir, {"lock.timeout.ms": 200}, exclusive=True) as store:
        assert [r.value for r in store.log("t", 0).records()] == [b"v"]


def test_read_only_store_is_refused(data_dir):
    kafkalog.LogStore(data_dir).close()
    with kafkalog.LogStore(data_dir, read_only=True) as ro, pytest.raises(kafkalog.errors.KafkaStorageError):
        KafkaProducer(ro)


def test_metrics_count_records_and_batches(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    for _ in range(10):
        p.send("t", b"v")
    p.flush()
    m = p.metrics()["producer-metrics"]
    assert (m["record-send-total"], m["batch-total"], m["records-per-batch-avg"]) == (10, 1, 10.0)
    p.close()


# ---------------------------------------------------------------------------------------------------- concurrency

def test_threads_share_a_producer(open_store):
    store = open_store()
    store.create_topic("t", 2)
    p = KafkaProducer(store, linger_ms=2, batch_size=500, acks=1)
    n_threads, n = 4, 500
    futures = {t: [] for t in range(n_threads)}

    def work(t):
        for i in range(n):
            futures[t].append(p.send("t", b"%d-%d" % (t, i), key=b"%d" % (i % 5)))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    p.flush()
    recs = all_records(store, "t")
    values = [r.value for q in recs for r in recs[q]]
    assert sorted(values) == sorted(b"%d-%d" % (t, i) for t in range(n_threads) for i in range(n))
    for t in range(n_threads):
        mds = [f.get(timeout=0) for f in futures[t]]
        for q in (0, 1):
            offsets = [md.offset for md in mds if md.partition == q]
            assert offsets == sorted(offsets)  # one thread's records keep their order per partition
        for md, i in zip(mds, range(n)):
            assert recs[md.partition][md.offset].value == b"%d-%d" % (t, i)
    p.close()


CHILD = r"""
import os, sys, time
from kafkalog.client.producer import KafkaProducer
path, n, ts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def wait_for(name):
    while not os.path.exists(os.path.join(path, name)):
        time.sleep(0.001)

p = KafkaProducer(path, linger_ms=1, batch_size=400, acks=1)
open(os.path.join(path, "child-ready"), "w").close()
wait_for("go")
futures = []
for i in range(n):  # in rounds with pauses, so that the two processes' writes overlap in time
    futures.append(p.send("shared", b"child-%d" % i, timestamp_ms=ts))
    if i % 300 == 299:
        p.flush()
        time.sleep(0.002)
p.flush()
assert all(f.succeeded() for f in futures)
wait_for("parent-done")
p.close()
"""


def test_two_processes_produce_to_one_store_without_offset_collisions(data_dir, child_env):
    """Two processes, one shared store, one partition, producing at the same time: every batch gets its own
    offsets. (Closes are sequenced and timestamps constant: a shared writer's Log.close() trims the active
    segment's indexes under the other writer, a storage issue this test is not about.)"""
    n, ts = 3000, int(time.time() * 1000)
    with kafkalog.LogStore(data_dir, maintenance=False) as store:
        store.create_topic("shared", 1)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data_dir), str(n), str(ts)], env=child_env)
    try:
        deadline = time.monotonic() + 30
        while not (data_dir / "child-ready").exists():
            assert child.poll() is None and time.monotonic() < deadline, "child did not start"
            time.sleep(0.005)
        p = KafkaProducer(data_dir, linger_ms=1, batch_size=400, acks=1)
        (data_dir / "go").touch()
        futures = []
        for i in range(n):
            futures.append(p.send("shared", b"parent-%d" % i, timestamp_ms=ts))
            if i % 300 == 299:
                p.flush()
                time.sleep(0.002)
        p.flush()
        (data_dir / "parent-done").touch()
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
    mine = [f.get(timeout=0).offset for f in futures]
    p.close()
    with kafkalog.LogStore(data_dir, read_only=True) as store:
        recs = list(store.log("shared", 0).records())
    assert [r.offset for r in recs] == list(range(2 * n))
    values = [r.value for r in recs]
    parent = [v for v in values if v.startswith(b"parent-")]
    child_values = [v for v in values if v.startswith(b"child-")]
    assert parent == [b"parent-%d" % i for i in range(n)] and child_values == [b"child-%d" % i for i in range(n)]
    assert [values[o] for o in mine] == parent
    # the two really interleaved: neither wrote all its records in one run
    firsts = [v[:5] for v in values]
    assert sum(a != b for a, b in zip(firsts, firsts[1:])) > 2


EXITS_WITHOUT_CLOSE = r"""
import sys
from kafkalog.client.producer import KafkaProducer
p = KafkaProducer(sys.argv[1], linger_ms=600000, acks=1)
p.send("t", b"lingering")
"""


def test_records_lingering_at_exit_are_written(data_dir, child_env):
    subprocess.run([sys.executable, "-c", EXITS_WITHOUT_CLOSE, str(data_dir)], env=child_env, check=True,
                   timeout=60)
    with kafkalog.LogStore(data_dir, read_only=True) as store:
        assert [r.value for r in store.log("t", 0).records()] == [b"lingering"]


def test_future_type_is_exported_for_isinstance_checks(open_store):
    store = open_store()
    p = KafkaProducer(store, acks=0)
    assert isinstance(p.send("t", b"v"), FutureRecordMetadata)
    p.close()
    assert os.path.isdir(store.path / "t-0")


# ---------------------------------------------------------------------------------------------------- compiled path

T0 = 1_700_000_000_000


def test_a_producer_batch_is_byte_for_byte_build_batch():
    """ProducerBatch encodes each record as it is added; the batch is the one build_batch makes of the same records
    (negative timestamp deltas, null keys and values, headers included), and facts() keeps what RecordMetadata
    reports."""
    rnd = random.Random(5)
    n = 700
    values = [rnd.randbytes(rnd.randrange(0, 300)) if i % 7 else None for i in range(n)]
    keys = [rnd.randbytes(rnd.randrange(0, 20)) if i % 3 else None for i in range(n)]
    ts = [T0 + rnd.randrange(-5000, 5000) for _ in range(n)]
    headers = [[("h", b"x"), ("\u00e9t\u00e9", None)] if i % 11 == 0 else None for i in range(n)]
    for codec in (0, "lz4"):
        b = ProducerBatch(codec)
        for i, (v, k, t, h) in enumerate(zip(values, keys, ts, headers)):
            assert b.add(v, k, t, h, -1 if h is None else 1 + 5, 10) == i
        assert (b.records_count, b.size) == (n, 10 * n)
        built = build_batch(values, keys, ts, headers, compression=codec)
        assert bytes(b.build_view()) == built == b.build()
        assert b.facts(0) == (ts[0], -1, -1, 1 + 5)
        assert b.facts(1) == (ts[1], len(keys[1]), len(values[1]), -1)


def test_records_sent_through_the_compiled_path_are_build_batch_bytes(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, batch_size=1 << 20, acks=1)
    rnd = random.Random(9)
    values = [rnd.randbytes(rnd.randrange(1, 200)) for _ in range(2000)]
    keys = [None if i % 4 == 0 else b"k%d" % i for i in range(2000)]
    ts = [T0 + i * 3 for i in range(2000)]
    futures = [p.send("t", v, k, timestamp_ms=t) for v, k, t in zip(values, keys, ts)]
    p.flush()
    (batch,) = batches(store, "t")
    assert batch.tobytes() == build_batch(values, keys, ts)
    mds = [f.get(timeout=0) for f in futures]
    assert [md.offset for md in mds] == list(range(2000))
    assert [(md.timestamp, md.serialized_key_size, md.serialized_value_size) for md in mds] == \
        [(t, -1 if k is None else len(k), len(v)) for v, k, t in zip(values, keys, ts)]
    p.close()


def test_bytes_like_values_are_copied_when_sent(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    value, key = bytearray(b"before"), bytearray(b"k")
    f = p.send("t", value, key=memoryview(key))
    value[:] = b"after!"
    key[:] = b"x"
    p.flush()
    (rec,) = store.log("t", 0).records()
    assert (rec.key, rec.value) == (b"k", b"before")
    assert (f.get().serialized_key_size, f.get().serialized_value_size) == (1, 6)
    p.close()


def test_a_built_view_outlives_drop_records():
    b = ProducerBatch()
    b.add(b"v" * 5000, None, T0)
    view = b.build_view()
    b.drop_records()  # the view still holds the buffer: dropping waits for it
    assert b.dropped and bytes(view) == build_batch([b"v" * 5000], timestamps=[T0])
    view.release()
    with pytest.raises(ValueError):
        b.add(b"late", None, T0)
    with pytest.raises(ValueError):
        b.build_view()
    assert b.facts(0) == (T0, -1, 5000, -1)


def test_a_topic_deleted_under_the_producer_fails_its_batch_then_is_created_again(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    lost = [p.send("t", b"lost-%d" % i) for i in range(5)]  # the first opens the batch, the others join it in C
    store.delete_topic("t")
    p.flush()
    assert all(isinstance(f.exception, LogClosedError) for f in lost)
    f = p.send("t", b"after")  # the producer forgot the topic: auto-created again
    p.flush()
    assert f.get(timeout=5).offset == 0
    assert [r.value for r in store.log("t", 0).records()] == [b"after"]
    p.close()


def test_threads_race_the_compiled_path_against_batch_turnover(open_store):
    """Unkeyed records from several threads, tiny batches, three partitions: the sticky partition moves and batches
    close all the time while other threads append without the lock. Every record lands exactly once, in its
    thread's order per partition, where its future says."""
    store = open_store()
    store.create_topic("t", 3)
    p = KafkaProducer(store, linger_ms=1, batch_size=700, acks=1)
    n_threads, n = 4, 3000
    futures = {t: [] for t in range(n_threads)}

    def work(t):
        send = p.send
        out = futures[t]
        for i in range(n):
            out.append(send("t", b"%d-%d" % (t, i), timestamp_ms=T0 + i))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    p.flush()
    recs = all_records(store, "t")
    assert sorted(r.value for q in recs for r in recs[q]) == sorted(
        b"%d-%d" % (t, i) for t in range(n_threads) for i in range(n))
    for t in range(n_threads):
        mds = [f.get(timeout=0) for f in futures[t]]
        for md, i in zip(mds, range(n)):
            assert recs[md.partition][md.offset].value == b"%d-%d" % (t, i)
        for q in range(3):
            offsets = [md.offset for md in mds if md.partition == q]
            assert offsets == sorted(offsets)
    assert len({md.partition for t in futures for md in (f.get(timeout=0) for f in futures[t])}) == 3
    p.close()


def test_futures_the_caller_holds_are_never_reused(open_store):
    """send() hands back the future it returned last once nobody holds it (as a free list would): a held future
    keeps its record, across batch turnover too, whatever was sent and dropped in between."""
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, linger_ms=LONG, batch_size=2000, acks=1)
    held = {}
    for i in range(300):
        f = p.send("t", b"v%d" % i, timestamp_ms=T0 + i)
        if i % 7 == 0:
            held[i] = f
        del f
        p.send("t", b"dropped", timestamp_ms=T0)  # its future is dropped at once
    p.flush()
    assert len({id(f) for f in held.values()}) == len(held)
    recs = list(store.log("t", 0).records())
    for i, f in held.items():
        md = f.get(timeout=0)
        assert (md.offset, md.timestamp) == (2 * i, T0 + i)
        assert recs[md.offset].value == b"v%d" % i
    p.close()


def test_send_takes_kafka_pythons_arguments_by_position_or_keyword(open_store):
    store = open_store()
    store.create_topic("t", 2)
    p = KafkaProducer(store, linger_ms=LONG, acks=1)
    assert str(inspect.signature(KafkaProducer.send)) == \
        "(self, /, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)"
    calls = [
        (("t", b"a", b"k", None, 1, T0), {}),
        (("t",), {"value": b"a", "key": b"k", "partition": 1, "timestamp_ms": T0}),
        ((), {"timestamp_ms": T0, "partition": 1, "key": b"k", "value": b"a", "topic": "t"}),
        (("t", b"a"), {"".join(["timest", "amp_ms"]): T0, "key": b"k", "partition": 1}),  # a name not interned
    ]
    futures = [p.send(*args, **kwargs) for args, kwargs in calls]
    p.flush()
    assert [(md.partition, md.offset, md.timestamp, md.serialized_key_size) for md in
            (f.get(timeout=0) for f in futures)] == [(1, i, T0, 1) for i in range(4)]
    for args, kwargs, message in [
        ((), {}, "missing required argument 'topic'"),
        ((), {"value": b"v"}, "missing required argument 'topic'"),
        (("t", b"v", None, None, None, None, 7), {}, "takes from 1 to 6 positional arguments but 7 were given"),
        (("t", b"v"), {"value": b"w"}, "multiple values for argument 'value'"),
        (("t", b"v"), {"topic": "t"}, "multiple values for argument 'topic'"),
        (("t", b"v"), {"timestamp": T0}, "unexpected keyword argument 'timestamp'"),
    ]:
        with pytest.raises(TypeError, match=message):
            p.send(*args, **kwargs)
    p.flush()
    assert store.log("t", 1).log_end_offset == 4
    p.close()
