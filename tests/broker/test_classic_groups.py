"""Groups whose members assign partitions themselves: confluent-kafka's cooperative-sticky (KIP-429, incremental
rebalancing) and kafka-python's sticky assignor run on the broker's classic coordinator, the leader's assignment
passed through; an embedded consumer cannot slip into such a group."""

from __future__ import annotations

import pytest

import kafkalog
from kafkalog.broker import Broker
from kafkalog.errors import InconsistentGroupProtocolError

from .wire import Wire, batch

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data", listen="127.0.0.1:0", config={"group.initial.rebalance.delay.ms": 0})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _fill(b, topic, partitions=4, per=5):
    with Wire(b.port) as w:
        assert w.create_topic(topic, partitions)["error_code"] == 0
        for p in range(partitions):
            w.produce(topic, p, batch([b"%d-%d" % (p, i) for i in range(per)]))
    return {b"%d-%d" % (p, i) for p in range(partitions) for i in range(per)}


def test_confluent_cooperative_sticky_splits_and_takes_over(broker, wait_for):
    expected = _fill(broker, "coop")
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "coop-g", "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "enable.auto.commit": True, "auto.commit.interval.ms": 100}
    # one thread drives both consumers, so nothing may block it: a synchronous commit would queue behind its own
    # connection's pending JoinGroup, which waits for the other consumer's next poll (Kafka serves a connection's
    # requests in order too); librdkafka commits on revoke and on close by itself
    a, b = ck.Consumer(conf), ck.Consumer(conf)
    try:
        _coop_split_then_takeover(broker, a, b, expected, wait_for)
    finally:
        a.close()  # idempotent in confluent-kafka: also after a failure half-way


def _coop_split_then_takeover(broker, a, b, expected, wait_for):
    got = []
    try:
        a.subscribe(["coop"])
        b.subscribe(["coop"])

        def poll_both():
            for c in (a, b):
                m = c.poll(0.1)
                if m is not None and not m.error():
                    got.append(m.value())
            return len(a.assignment()) == 2 and len(b.assignment()) == 2
        wait_for(poll_both, timeout=40, what="a 2/2 split under cooperative-sticky")
        assert {tp.partition for tp in a.assignment()} | {tp.partition for tp in b.assignment()} == {0, 1, 2, 3}
        state = kafkalog.client.group.describe_group(kafkalog.LogStore(broker.data_dir, read_only=True), "coop-g")
        assert state["protocol"] == "cooperative-sticky" and len(state["members"]) == 2
    finally:
        b.close()

    def rest():
        m = a.poll(0.1)
        if m is not None and not m.error():
            got.append(m.value())
        return len(a.assignment()) == 4 and set(got) >= expected
    wait_for(rest, timeout=40, what="the remaining member to take all four partitions and read everything")
    assert sorted(got) == sorted(expected)  # every record once: commits carried over the rebalances


def test_kafka_python_sticky_group_and_an_embedded_consumer_is_refused(broker, wait_for):
    expected = _fill(broker, "sticky", partitions=2)
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    c = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id="sticky-g",
                            auto_offset_reset="earliest", partition_assignment_strategy=[StickyPartitionAssignor],
                            session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        # the topic's metadata first: kafka-python's sticky assignor assigns nothing for a topic it has no metadata
        # for yet ("No partition metadata for topic sticky") and does not rejoin when it arrives (a client race
        # that a loaded machine made this test lose about one run in five)
        assert c.partitions_for_topic("sticky") == {0, 1}
        c.subscribe(["sticky"])
        got = []

        def drain():
            for recs in c.poll(timeout_ms=100).values():
                got.extend(r.value for r in recs)
            return set(got) >= expected
        wait_for(drain, timeout=40, what="the sticky member to read both partitions")
        assert sorted(got) == sorted(expected)
        with pytest.raises(InconsistentGroupProtocolError, match="no partition assignment strategy in common"):
            kafkalog.KafkaConsumer("sticky", store=broker.data_dir, group_id="sticky-g")  # joins as it subscribes
        assert len(c.assignment()) == 2  # untouched
    finally:
        c.close()


def test_a_handed_out_member_id_does_not_claim_the_group(broker):
    _fill(broker, "claim", partitions=1, per=1)
    from kafkalog.broker import protocol
    meta = protocol.encode_subscription(["claim"])

    def join(w, member_id, name):
        return w.call(11, 5, {"group_id": "claim-g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                              "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": name, "metadata": meta}]})
    with Wire(broker.port) as coop, Wire(broker.port) as ranged:
        first = join(coop, "", "cooperative-sticky")
        assert first["error_code"] == 79
        r = join(ranged, "", "range")
        assert r["error_code"] == 79
        r = join(ranged, r["member_id"], "range")
        assert r["error_code"] == 0 and r["protocol_name"] == "range"
        # the cooperative client comes back with the id it was given: the group runs on the model now
        assert join(coop, first["member_id"], "cooperative-sticky")["error_code"] == 25
        assert join(coop, "", "cooperative-sticky")["error_code"] == 79
