"""The lab's smoke test: Kafka 4.4.0 and kafkalog both answer, and the same small workload (create a topic, produce
three keyed records with confluent-kafka, read them back) gives the same offsets and high watermark on each."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .lab import KAFKA_VERSION, diff_answers

LAB_TEST_DEADLINE_S = 90
RECORDS = [(b"k0", b"first"), (b"k1", b"second"), (b"k2", b"third")]


def workload(bootstrap: str, topic: str) -> dict:
    """Create ``topic`` (2 partitions), produce RECORDS to partition 1, read them back: the observable answers."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    fut = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)], operation_timeout=15)
    fut[topic].result(timeout=30)

    delivered = []
    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 0,
                         "enable.idempotence": False})

    def on_delivery(err, msg):
        delivered.append((None if err is None else err.str(), msg.partition(), msg.offset()))

    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, partition=1, on_delivery=on_delivery)
        producer.flush(30)  # one record per batch: each answer carries its own offset
    assert producer.flush(30) == 0, "records still queued after 30 s"

    consumer = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": topic,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 1, 0)])
        got = []
        end = time.monotonic() + 30
        while len(got) < len(RECORDS) and time.monotonic() < end:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        low1, high1 = consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10, cached=False)
        low0, high0 = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {"delivered": delivered, "consumed": got, "watermarks": {0: (low0, high0), 1: (low1, high1)},
            "partitions": sorted(md.partitions), "topic_error": None if md.error is None else md.error.str()}


def test_both_brokers_answer_the_same(kafka, kafkalog, topic_name, compare):
    topic = topic_name()
    answers = {name: workload(server.bootstrap, topic) for name, server in (("kafka", kafka), ("kafkalog", kafkalog))}

    # Kafka's own answer is what the workload means: offsets 0, 1, 2 in partition 1, read back in order
    expected = {"delivered": [(None, 1, 0), (None, 1, 1), (None, 1, 2)],
                "consumed": [(1, i, k, v) for i, (k, v) in enumerate(RECORDS)],
                "watermarks": {0: (0, 0), 1: (0, 3)}, "partitions": [0, 1], "topic_error": None}
    assert not diff_answers(expected, answers["kafka"]), (
        f"Kafka {KAFKA_VERSION} itself did not answer as expected: {diff_answers(expected, answers['kafka'])}")
    compare(answers["kafka"], answers["kafkalog"], what="create + produce 3 + consume")


def test_lab_brokers_report_themselves(kafka, kafkalog):
    for server in (kafka, kafkalog):
        assert server.running(), server.log_tail()
        assert server.rss() > 10 * 2**20
        assert server.startup_s > 0
        assert server.log_dir.is_dir()
    # Kafka's formatted log dir carries its cluster id
    meta = (kafka.log_dir / "meta.properties").read_text()
    assert f"cluster.id={kafka.cluster_id}" in meta
