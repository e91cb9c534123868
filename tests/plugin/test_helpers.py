"""The helpers on a LocalBroker, without an inner run (a broker in a thread starts in ~20 ms): they share one
connection per broker and ask the broker only what they must, and still see what other clients change (a topic
deleted and made again with more partitions, partitions added, records deleted)."""

from __future__ import annotations

import pytest

from kafkalog.testing import LocalBroker, wire

METADATA, LIST_OFFSETS, CREATE_TOPICS, DELETE_TOPICS = 3, 2, 19, 20


@pytest.fixture
def broker():
    with LocalBroker("thread") as b:
        yield b


@pytest.fixture
def seen(monkeypatch):
    """{"connections": n, "calls": [api keys]} of every kafkalog.testing.Admin from now on."""
    out = {"connections": 0, "calls": []}
    real_connect, real_call = wire.socket.create_connection, wire.Admin.call

    def connect(*a, **kw):
        out["connections"] += 1
        return real_connect(*a, **kw)

    def call(self, api_key, version, body):
        out["calls"].append(api_key)
        return real_call(self, api_key, version, body)
    monkeypatch.setattr(wire.socket, "create_connection", connect)
    monkeypatch.setattr(wire.Admin, "call", call)
    return out


def test_one_connection_and_no_repeated_lookups(broker, seen):
    for i in range(5):
        t = broker.create_topic(f"t{i}")
        assert broker.produce(t, [b"a", b"b"]) == [(0, 0), (0, 1)]
        assert [r.value for r in broker.consume_all(t, count=2)] == [b"a", b"b"]
        broker.delete_topic(t)
    assert seen["connections"] == 1
    # a test's round: CreateTopics, Produce (the topic known: no Metadata), Metadata + Fetch, DeleteTopics
    assert seen["calls"] == [CREATE_TOPICS, 0, METADATA, 1, DELETE_TOPICS] * 5


def test_a_restart_reconnects(broker, seen):
    broker.produce("r", [b"x"])
    broker.restart()
    broker.produce("r", [b"y"])
    assert [r.value for r in broker.consume_all("r")] == [b"x", b"y"]
    assert seen["connections"] == 2


def test_other_clients_changes_are_seen(broker):
    ck = pytest.importorskip("confluent_kafka.admin")
    t = broker.create_topic("changing")
    broker.produce(t, [b"one"])
    other = ck.AdminClient(broker.client_config("confluent"))
    # deleted behind the helpers' back: a produce makes it again, as a producer's Metadata request would
    other.delete_topics([t])[t].result(30)
    assert broker.produce(t, [b"again"]) == [(0, 0)]
    # deleted and made again with 3 partitions behind the helpers' back: a produce to partition 2 works
    other.delete_topics([t])[t].result(30)
    other.create_topics([ck.NewTopic(t, 3)])[t].result(30)
    assert broker.produce(t, [{"value": b"p2", "partition": 2}]) == [(2, 0)]
    # partitions added by another client: consume_all reads them too
    other.create_partitions([ck.NewPartitions(t, 4)])[t].result(30)
    broker.produce(t, [{"value": b"p3", "partition": 3}])
    assert [(r.partition, r.value) for r in broker.consume_all(t, count=2)] == [(2, b"p2"), (3, b"p3")]
    # records deleted before offset 2: read from the log start on
    broker.produce(t, [b"a", b"b", b"c"], partition=0)
    tp = __import__("confluent_kafka").TopicPartition(t, 0, 2)
    other.delete_records([tp])[tp].result(30)
    assert [(r.partition, r.offset) for r in broker.consume_all(t) if r.partition == 0] == [(0, 2)]
