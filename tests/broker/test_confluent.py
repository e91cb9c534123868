"""confluent-kafka (librdkafka 2.16) against the broker over loopback: AdminClient create/delete topics, DeleteRecords
and ListOffsets, produce with every codec librdkafka has, consume from the beginning and from a timestamp, groups
with commits across a broker restart, and a two-member rebalance. Record contents are compared exactly."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

pytestmark = pytest.mark.usefixtures("deadline")

T0 = (int(time.time()) - 600) * 1000
GROUP_TIMEOUTS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 10000}
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def make_records(n: int, tag: str = "r", start: int = 0):
    return [(b"k%d" % i, (b"%s-%05d:" % (tag.encode(), i)) + b"x" * (i % 7 * 10),
             [("h", b"%d" % i), ("tag", tag.encode())], T0 + i * 1000)
            for i in range(start, start + n)]


def as_tuples(msgs):
    out = []
    for m in msgs:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_CREATE_TIME
        out.append((m.offset(), m.key(), m.value(), m.headers() or [], ts))
    return out


def expected(records, first_offset: int = 0):
    return [(first_offset + i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)]


def conf(broker, **kw):
    c = {"bootstrap.servers": broker.bootstrap_servers, "socket.timeout.ms": 10000,
         "broker.address.family": "v4"}
    c.update(kw)
    return c


def admin(broker):
    return AdminClient(conf(broker))


def create_topic(broker, name: str, partitions: int = 1) -> None:
    a = admin(broker)  # held until the future is done: a destroyed handle fails its futures
    fs = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                         operation_timeout=10, request_timeout=10)
    fs[name].result(timeout=15)


def produce(broker, topic: str, records, partition: int = 0, **kw):
    """Produce and return the delivery reports (partition, offset, timestamp) in send order."""
    p = Producer(conf(broker, **{"linger.ms": 5, "message.timeout.ms": 15000, **kw}))
    reports = []

    def on_delivery(err, msg):
        reports.append((err, msg.partition(), msg.offset(), msg.timestamp()[1]))

    for k, v, h, ts in records:
        p.produce(topic, value=v, key=k, headers=h, timestamp=ts, partition=partition, on_delivery=on_delivery)
    assert p.flush(15) == 0
    assert [r[0] for r in reports] == [None] * len(records), reports
    return [r[1:] for r in reports]


def consumer(broker, **kw):
    return Consumer(conf(broker, **{"group.id": kw.pop("group_id", "ck-test-reader"), "enable.auto.commit": False,
                                    "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200,
                                    "enable.partition.eof": False, **kw}))


def consume_n(c, n: int, timeout: float = 15.0, settle: float = 0.3):
    out = []
    end = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        for m in c.consume(num_messages=n - len(out), timeout=0.3):
            assert m.error() is None, m.error()
            out.append(m)
    if len(out) >= n:
        for m in c.consume(num_messages=100, timeout=settle):
            assert m.error() is None, m.error()
            out.append(m)
    return out


def read_all(broker, topic: str, n: int, offset: int = OFFSET_BEGINNING, partition: int = 0):
    c = consumer(broker)
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        return consume_n(c, n)
    finally:
        c.close()


def list_offset(broker, topic: str, spec, partition: int = 0):
    tp = TopicPartition(topic, partition)
    a = admin(broker)
    return a.list_offsets({tp: spec}, request_timeout=10)[tp].result(timeout=15)


def test_create_topic_metadata_and_duplicate(broker, topic_name):
    name = topic_name()
    create_topic(broker, name, partitions=3)
    md = admin(broker).list_topics(timeout=10)
    assert sorted(md.topics[name].partitions) == [0, 1, 2]
    assert md.topics[name].error is None
    with pytest.raises(KafkaException) as err:
        create_topic(broker, name, partitions=3)
    assert err.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_from_beginning(broker, topic_name, codec):
    topic = topic_name()
    create_topic(broker, topic)
    records = make_records(40, tag=codec)
    reports = produce(broker, topic, records, **{"compression.type": codec})
    assert reports == [(0, i, T0 + i * 1000) for i in range(40)]
    assert as_tuples(read_all(broker, topic, 40)) == expected(records)


def test_idempotent_producer(broker, topic_name):
    topic = topic_name()
    create_topic(broker, topic)
    records = make_records(30, tag="idem")
    reports = produce(broker, topic, records, **{"enable.idempotence": True, "compression.type": "lz4"})
    assert [r[1] for r in reports] == list(range(30))
    assert as_tuples(read_all(broker, topic, 30)) == expected(records)


def test_offsets_for_times_and_consume_from_timestamp(broker, topic_name):
    topic = topic_name()
    create_topic(broker, topic)
    records = make_records(20, tag="ts")
    produce(broker, topic, records[:10])
    produce(broker, topic, records[10:])
    c = consumer(broker)
    try:
        def lookup(ts):
            [tp] = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.error is None
            return tp.offset
        assert lookup(T0 + 12_500) == 13
        assert lookup(T0) == 0
        assert lookup(T0 + 5_000) == 5
        assert lookup(T0 + 60_000) == -1  # later than every record: OFFSET_END
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 20)
        c.assign([TopicPartition(topic, 0, lookup(T0 + 12_500))])
        assert as_tuples(consume_n(c, 7)) == expected(records[13:], 13)
    finally:
        c.close()
    assert list_offset(broker, topic, OffsetSpec.for_timestamp(T0 + 12_500)).offset == 13
    assert list_offset(broker, topic, OffsetSpec.latest()).offset == 20


def test_group_commit_then_broker_restart_resumes_at_commit(own_broker, topic_name):
    topic, group = topic_name("t"), topic_name("g")
    create_topic(own_broker, topic)
    records = make_records(14, tag="grp")
    produce(own_broker, topic, records[:10])
    tp = TopicPartition(topic, 0)

    c = consumer(own_broker, group_id=group, **GROUP_TIMEOUTS)
    try:
        c.subscribe([topic])
        got = []
        end = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < end:
            got.extend(m for m in c.consume(num_messages=6 - len(got), timeout=0.3) if m.error() is None)
        assert as_tuples(got) == expected(records[:6])
        [done] = c.commit(asynchronous=False)  # the consumed position: offset 6
        assert (done.topic, done.partition, done.offset, done.error) == (topic, 0, 6, None)
        assert [x.offset for x in c.committed([tp], timeout=10)] == [6]
    finally:
        c.close()

    own_broker.restart()
    produce(own_broker, topic, records[10:])

    c = consumer(own_broker, group_id=group, **GROUP_TIMEOUTS)
    try:
        assert [x.offset for x in c.committed([tp], timeout=10)] == [6]
        c.subscribe([topic])
        assert as_tuples(consume_n(c, 8, timeout=20)) == expected(records[6:], 6)
        c.commit(offsets=[TopicPartition(topic, 0, 14, metadata="done")], asynchronous=False)
        [after] = c.committed([tp], timeout=10)
        assert (after.offset, after.metadata) == (14, "done")
    finally:
        c.close()


def test_delete_records_moves_log_start(broker, topic_name):
    topic = topic_name()
    create_topic(broker, topic)
    records = make_records(10, tag="del")
    produce(broker, topic, records)
    tp = TopicPartition(topic, 0, 4)
    a = admin(broker)
    deleted = a.delete_records([tp], request_timeout=10, operation_timeout=10)
    assert deleted[tp].result(timeout=15).low_watermark == 4
    assert list_offset(broker, topic, OffsetSpec.earliest()).offset == 4
    c = consumer(broker)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (4, 10)
    finally:
        c.close()
    assert as_tuples(read_all(broker, topic, 6)) == expected(records[4:], 4)
    everything = TopicPartition(topic, 0, -1)  # OFFSET_END: up to the high watermark
    deleted = a.delete_records([everything], request_timeout=10, operation_timeout=10)
    assert deleted[everything].result(timeout=15).low_watermark == 10
    assert list_offset(broker, topic, OffsetSpec.earliest()).offset == 10


def test_delete_topic(broker, topic_name):
    topic, other = topic_name("gone"), topic_name("kept")
    create_topic(broker, topic)
    create_topic(broker, other)
    produce(broker, topic, make_records(3))
    a = admin(broker)
    fs = a.delete_topics([topic], operation_timeout=10, request_timeout=10)
    assert fs[topic].result(timeout=15) is None
    topics = a.list_topics(timeout=10).topics
    assert topic not in topics and other in topics


def test_two_members_split_partitions_then_rebalance_on_leave(broker, topic_name, wait_for):
    topic, group = topic_name("t"), topic_name("g")
    create_topic(broker, topic, partitions=4)
    # librdkafka's default auto commit, with a long interval: positions are committed when partitions are revoked
    # (during the rebalance, at the generation being replaced, as Kafka accepts) and on close
    members = {name: consumer(broker, group_id=group, **{"client.id": f"ck-{name}", "enable.auto.commit": True,
                                                         "auto.commit.interval.ms": 60000}, **GROUP_TIMEOUTS)
               for name in ("a", "b")}
    got = {"a": [], "b": []}

    def pump(names=("a", "b")):
        """librdkafka joins in its own threads; poll() serves the assignment and delivers records."""
        for name in names:
            for m in members[name].consume(num_messages=100, timeout=0.05):
                assert m.error() is None, m.error()
                got[name].append(m)

    def assigned(name):
        return {tp.partition for tp in members[name].assignment()}

    try:
        members["a"].subscribe([topic])

        def a_alone():
            pump(("a",))
            return assigned("a") == {0, 1, 2, 3}
        wait_for(a_alone, 20, "the first member holds all four partitions", interval=0)
        members["b"].subscribe([topic])

        def split():
            pump()
            a, b = assigned("a"), assigned("b")
            return len(a) == 2 and len(b) == 2 and a | b == {0, 1, 2, 3}
        wait_for(split, 25, "two members hold two partitions each", interval=0)
        parts = {"a": assigned("a"), "b": assigned("b")}

        sent = {p: make_records(3, tag=f"p{p}", start=10 * p) for p in range(4)}
        for p in range(4):
            produce(broker, topic, sent[p], partition=p)

        def per_partition(msgs):
            return {p: [(m.offset(), m.key(), m.value()) for m in msgs if m.partition() == p] for p in range(4)}

        def want(ps, first):
            return {p: ([(first + i, k, v) for i, (k, v, _, _) in enumerate(sent[p])] if p in ps else [])
                    for p in range(4)}

        def all_in():
            pump()
            return len(got["a"]) + len(got["b"]) >= 12
        wait_for(all_in, 15, "both members got the records of their partitions", interval=0)
        assert per_partition(got["a"]) == want(parts["a"], 0)
        assert per_partition(got["b"]) == want(parts["b"], 0)

        members.pop("b").close()  # LeaveGroup
        before = len(got["a"])

        def a_all():
            pump(("a",))
            return assigned("a") == {0, 1, 2, 3}
        wait_for(a_all, 20, "the remaining member holds all four partitions", interval=0)
        for p in range(4):
            sent[p] = make_records(2, tag=f"q{p}", start=10 * p + 3)
            produce(broker, topic, sent[p], partition=p)

        def a_got_all():
            pump(("a",))
            return len(got["a"]) >= before + 8
        wait_for(a_got_all, 15, "the remaining member got all the new records", interval=0)
        pump(("a",))
        # a's commit on revoke and b's on close were accepted: every partition resumes at 3, no record twice
        assert per_partition(got["a"][before:]) == want({0, 1, 2, 3}, 3)
    finally:
        for c in members.values():
            c.close()


def test_a_compacted_topic_answers_a_keyless_produce_with_invalid_record(broker):
    """Over the wire: the batch with a keyless record is refused (INVALID_RECORD, 87) and nothing of it is
    appended; keyed records before and after it are."""
    a = admin(broker)
    a.create_topics([NewTopic("compacted-keys", num_partitions=1, replication_factor=1,
                              config={"cleanup.policy": "compact"})])["compacted-keys"].result(timeout=15)
    p = Producer(conf(broker, **{"linger.ms": 0, "message.timeout.ms": 15000, "retries": 0}))
    results = []
    for key in (b"k1", None, b"k2"):
        p.produce("compacted-keys", value=b"v", key=key, partition=0,
                  on_delivery=lambda err, msg: results.append(err))
        p.flush(15)
    assert results[0] is None and results[2] is None, results
    assert results[1] is not None and results[1].code() == KafkaError.INVALID_RECORD, results
    assert [(m.offset(), m.key()) for m in read_all(broker, "compacted-keys", 2)] == [(0, b"k1"), (1, b"k2")]
