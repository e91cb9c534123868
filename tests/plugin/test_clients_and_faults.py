"""The three Python clients' fixtures, fault injection as a real client sees it, restarts and the SASL broker, each
scenario one inner pytest run (~1-4 s)."""

from __future__ import annotations

import pytest

CLIENTS = r'''
import asyncio
import pytest


def test_confluent(confluent_producer, confluent_consumer, confluent_admin, kafka_topic):
    t = kafka_topic()
    acked = []
    for i in range(3):
        confluent_producer.produce(t, b"v%d" % i, key=b"k", on_delivery=lambda err, msg: acked.append(err))
    assert confluent_producer.flush(10) == 0 and acked == [None] * 3
    confluent_consumer.subscribe([t])
    got = []
    for _ in range(200):
        m = confluent_consumer.poll(0.1)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) == 3:
            break
    assert got == [b"v0", b"v1", b"v2"]
    assert t in confluent_admin.list_topics(timeout=10).topics


def test_kafka_python(kafka_python_producer, kafka_python_consumer, kafka_python_admin, kafka_topic):
    t = kafka_topic(partitions=2)
    meta = kafka_python_producer.send(t, b"hello", partition=1).get(timeout=10)
    assert (meta.partition, meta.offset) == (1, 0)
    kafka_python_consumer.subscribe([t])
    got = []
    for _ in range(100):
        for recs in kafka_python_consumer.poll(timeout_ms=100).values():
            got += [r.value for r in recs]
        if got:
            break
    assert got == [b"hello"]
    assert t in kafka_python_admin.list_topics()


@pytest.mark.asyncio
async def test_aiokafka(aiokafka_producer, aiokafka_consumer, kafka_topic):
    t = kafka_topic()
    meta = await aiokafka_producer.send_and_wait(t, b"async")
    assert meta.offset == 0
    aiokafka_consumer.subscribe([t])
    msg = await asyncio.wait_for(aiokafka_consumer.getone(), 20)
    assert msg.value == b"async"


def test_wait_for_group(kafka_broker, confluent_consumer, kafka_group, kafka_topic):
    t = kafka_topic()
    confluent_consumer.subscribe([t])
    for _ in range(50):
        confluent_consumer.poll(0.05)
        if confluent_consumer.assignment():
            break
    g = kafka_broker.wait_for_group(kafka_group, "Stable", members=1)
    assert g["protocol"] and len(g["members"]) == 1
'''


def test_client_fixtures(inner):
    r = inner(CLIENTS)
    r.assert_outcomes(passed=4)


FAULTS = r'''
import pytest
from confluent_kafka import KafkaError, Producer


def deliver(producer, topic, value, polls=100):
    out = []
    producer.produce(topic, value, on_delivery=lambda err, msg: out.append((err, msg.offset())))
    for _ in range(polls):
        producer.poll(0.1)
        if out:
            return out[0]
    return None


def test_retriable_errors_are_retried_by_the_client(kafka_broker, kafka_topic):
    t = kafka_topic()
    before = kafka_broker.injected
    kafka_broker.fail_produce(t, "NOT_ENOUGH_REPLICAS", count=2)
    p = Producer({**kafka_broker.client_config("confluent"), "retry.backoff.ms": 10, "linger.ms": 0})
    err, offset = deliver(p, t, b"survives")
    assert err is None and offset == 0
    assert kafka_broker.injected == before + 2 and kafka_broker.pending_faults() == 0
    assert [r.value for r in kafka_broker.consume_all(t)] == [b"survives"]


def test_a_fatal_error_reaches_the_application(kafka_broker, kafka_topic):
    t = kafka_topic()
    kafka_broker.fail_produce(t, 87, count=1)  # INVALID_RECORD: not retriable
    p = Producer({**kafka_broker.client_config("confluent"), "linger.ms": 0})
    err, _ = deliver(p, t, b"refused")
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    assert kafka_broker.consume_all(t) == []  # nothing of it appended
    assert deliver(p, t, b"next")[0] is None


def test_only_the_named_topic_and_partition(kafka_broker, kafka_topic):
    t, other = kafka_topic(partitions=2), kafka_topic()
    before = kafka_broker.injected
    kafka_broker.fail_produce(t, "KAFKA_STORAGE_ERROR", partition=1)
    kafka_broker.produce(other, [b"x"])
    kafka_broker.produce(t, [{"value": b"p0", "partition": 0}])
    with pytest.raises(Exception, match="KAFKA_STORAGE_ERROR"):
        kafka_broker.produce(t, [{"value": b"p1", "partition": 1}])
    assert kafka_broker.injected == before + 1


def test_stalled_partition(kafka_broker, kafka_topic, confluent_consumer):
    t = kafka_topic()
    kafka_broker.produce(t, [b"before"])
    kafka_broker.stall(t, 0)
    p = Producer({**kafka_broker.client_config("confluent"), "linger.ms": 0})
    assert deliver(p, t, b"held", polls=5) is None  # 0.5 s: not answered while stalled
    confluent_consumer.subscribe([t])
    seen = [confluent_consumer.poll(0.1) for _ in range(10)]
    assert not [m for m in seen if m is not None and not m.error()]  # the fetches return nothing
    kafka_broker.resume(t)
    out = []
    for _ in range(100):
        p.poll(0.1)
        m = confluent_consumer.poll(0.1)
        if m is not None and not m.error():
            out.append(m.value())
        if len(out) == 2:
            break
    assert out == [b"before", b"held"]


def test_restart_keeps_records_and_clients_reconnect(kafka_broker, kafka_topic):
    t = kafka_topic()
    p = Producer({**kafka_broker.client_config("confluent"), "linger.ms": 0})
    assert deliver(p, t, b"one")[0] is None
    port, before = kafka_broker.port, kafka_broker.restarts
    kafka_broker.restart()
    assert kafka_broker.port == port and kafka_broker.restarts == before + 1
    err, offset = deliver(p, t, b"two")
    assert err is None and offset == 1
    assert [r.value for r in kafka_broker.consume_all(t)] == [b"one", b"two"]


def test_a_restart_ends_the_faults(kafka_broker, kafka_topic):
    t = kafka_topic(partitions=2)
    kafka_broker.fail_produce(t, "NOT_ENOUGH_REPLICAS", count=5)
    with pytest.raises(Exception, match="NOT_ENOUGH_REPLICAS"):
        kafka_broker.produce(t, [b"refused"])
    kafka_broker.stall(t, 1)
    assert kafka_broker.pending_faults() == 4 and kafka_broker.injected >= 1
    kafka_broker.restart()
    assert (kafka_broker.pending_faults(), kafka_broker.injected) == (0, 0)
    assert kafka_broker.produce(t, [{"value": b"p0", "partition": 0}, {"value": b"p1", "partition": 1}]) \
        == [(0, 0), (1, 0)]  # neither refused nor held: both faults ended, nothing refused was appended


def test_bad_error_names_are_refused(kafka_broker):
    with pytest.raises(ValueError, match="unknown Kafka error name"):
        kafka_broker.fail_produce("t", "NO_SUCH_ERROR")
    with pytest.raises(ValueError):
        kafka_broker.fail_produce("t", 0)
'''


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_fault_injection_seen_by_a_real_client(inner, mode):
    r = inner(FAULTS, f"--kafkalog-mode={mode}")
    r.assert_outcomes(passed=7)


SASL = r'''
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient


def deliver(conf, topic, value):
    out = []
    p = Producer({**conf, "linger.ms": 0, "message.timeout.ms": 5000})
    p.produce(topic, value, on_delivery=lambda err, msg: out.append(err))
    p.flush(10)
    return out[0]


def test_users_log_in(kafka_broker_sasl):
    assert kafka_broker_sasl.security_protocol == "SASL_PLAINTEXT"
    for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert deliver(kafka_broker_sasl.client_config("confluent", user="bob", mechanism=mech), "open", b"x") is None


def test_wrong_password_is_refused(kafka_broker_sasl):
    conf = {**kafka_broker_sasl.client_config("confluent"), "sasl.password": "wrong"}
    err = deliver(conf, "open", b"x")
    assert err is not None


def test_acls_narrow_a_topic(kafka_broker_sasl):
    kafka_broker_sasl.add_acl("User:alice", "WRITE", "TOPIC", "private")
    kafka_broker_sasl.add_acl("User:alice", "DESCRIBE", "TOPIC", "private")
    kafka_broker_sasl.add_acl("User:alice", "CREATE", "TOPIC", "private")
    assert deliver(kafka_broker_sasl.client_config("confluent", user="alice"), "private", b"x") is None
    err = deliver(kafka_broker_sasl.client_config("confluent", user="bob"), "private", b"x")
    assert err is not None and "authoriz" in str(err).lower()


def test_admin_and_helpers_as_the_super_user(kafka_broker_sasl):
    kafka_broker_sasl.produce("helpers", [b"1", b"2"])
    assert [r.value for r in kafka_broker_sasl.consume_all("helpers")] == [b"1", b"2"]
    kafka_broker_sasl.add_user("carol", "carol-secret")
    assert deliver(kafka_broker_sasl.client_config("confluent", user="carol"), "open", b"c") is None
'''


def test_sasl_broker(inner):
    r = inner(SASL)
    r.assert_outcomes(passed=4)
