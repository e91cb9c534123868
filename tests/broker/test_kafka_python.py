"""kafka-python 3.0.12 against the broker over loopback: admin, its default (idempotent, acks=all) producer, every
codec it has here, time-based seeks, groups with commits across a broker restart, DeleteRecords, DeleteTopics and a
two-member rebalance. Record contents (offset, key, value, headers, timestamp) are compared exactly."""

from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kp_codec
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata

pytestmark = pytest.mark.usefixtures("deadline")

# A whole second in the recent past: brokers may refuse timestamps far from their clock.
T0 = (int(time.time()) - 600) * 1000
GROUP_TIMEOUTS = dict(session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=10000)
CODECS = {"none": lambda: True, "gzip": kp_codec.has_gzip, "snappy": kp_codec.has_snappy, "lz4": kp_codec.has_lz4,
          "zstd": kp_codec.has_zstd}


def make_records(n: int, tag: str = "r", start: int = 0):
    """(key, value, headers, timestamp_ms) with every field distinct per record."""
    return [(b"k%d" % i, (b"%s-%05d:" % (tag.encode(), i)) + b"x" * (i % 7 * 10),
             [("h", b"%d" % i), ("tag", tag.encode())], T0 + i * 1000)
            for i in range(start, start + n)]


def as_tuples(records):
    return [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records]


def expected(records, first_offset: int = 0):
    return [(first_offset + i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)]


def admin(broker):
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10000,
                            client_id="kp-test-admin")


def producer(broker, **kw):
    return KafkaProducer(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10000, max_block_ms=10000,
                         **kw)


def consumer(broker, **kw):
    kw.setdefault("enable_auto_commit", False)
    kw.setdefault("auto_offset_reset", "earliest")
    return KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=11000,
                         fetch_max_wait_ms=200, **kw)


def create_topic(broker, name: str, partitions: int = 1) -> None:
    a = admin(broker)
    try:
        a.create_topics([NewTopic(name, partitions, 1)], timeout_ms=10000)
    finally:
        a.close()


def produce(broker, topic: str, records, partition: int | None = 0, **kw):
    p = producer(broker, **kw)
    try:
        futures = [p.send(topic, value=v, key=k, headers=h, timestamp_ms=ts, partition=partition)
                   for k, v, h, ts in records]
        p.flush(timeout=15)
        return [f.get(timeout=15) for f in futures]
    finally:
        p.close(timeout=5)


def poll_n(c, n: int, timeout: float = 15.0, settle_ms: int = 300):
    """Exactly what the consumer returns until n records came (then one more short poll to catch extras)."""
    out = []
    end = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        for recs in c.poll(timeout_ms=300).values():
            out.extend(recs)
    if len(out) >= n:
        for recs in c.poll(timeout_ms=settle_ms).values():
            out.extend(recs)
    return out


def read_all(broker, topic: str, n: int, partition: int = 0, from_offset: int | None = None):
    c = consumer(broker)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        if from_offset is None:
            c.seek_to_beginning(tp)
        else:
            c.seek(tp, from_offset)
        return poll_n(c, n)
    finally:
        c.close()


def test_create_topic_metadata_and_duplicate(broker, topic_name):
    name = topic_name()
    a = admin(broker)
    try:
        result = a.create_topics([NewTopic(name, 3, 1)], timeout_ms=10000)
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(name, 0)]
        assert name in a.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            a.create_topics([NewTopic(name, 3, 1)], timeout_ms=10000)
    finally:
        a.close()
    c = consumer(broker)
    try:
        assert c.partitions_for_topic(name) == {0, 1, 2}
    finally:
        c.close()


@pytest.mark.parametrize("codec", list(CODECS))
def test_produce_and_consume_from_beginning(broker, topic_name, codec):
    if not CODECS[codec]():
        pytest.skip(f"kafka-python has no {codec} codec here (python-snappy is not installed)")
    topic = topic_name()
    create_topic(broker, topic)
    records = make_records(40, tag=codec)
    meta = produce(broker, topic, records, compression_type=None if codec == "none" else codec, linger_ms=5)
    assert [(m.partition, m.offset, m.timestamp) for m in meta] == [(0, i, T0 + i * 1000) for i in range(40)]
    got = read_all(broker, topic, 40)
    assert as_tuples(got) == expected(records)
    assert {r.timestamp_type for r in got} == {0}  # CreateTime: the producer's timestamps are kept


def test_default_producer_is_idempotent_acks_all(broker, topic_name):
    topic = topic_name()
    create_topic(broker, topic)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)  # defaults, as a user would write it
    try:
        assert p.config["enable_idempotence"] is True and p.config["acks"] == -1
        records = make_records(25, tag="idem")
        futures = [p.send(topic, value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in records]
        p.flush(timeout=15)
        offsets = [f.get(timeout=15).offset for f in futures]
        # a second burst on the same producer id continues the sequence
        more = make_records(5, tag="idem2", start=25)
        futures = [p.send(topic, value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in more]
        p.flush(timeout=15)
        offsets += [f.get(timeout=15).offset for f in futures]
    finally:
        p.close(timeout=5)
    assert offsets == list(range(30))
    assert as_tuples(read_all(broker, topic, 30)) == expected(records + more)


def test_offsets_for_times_and_consume_from_timestamp(broker, topic_name):
    topic = topic_name()
    create_topic(broker, topic)
    records = make_records(20, tag="ts")  # timestamps T0, T0+1 s, ..., T0+19 s
    produce(broker, topic, records[:10], linger_ms=0)
    produce(broker, topic, records[10:], linger_ms=0)  # a second batch: the search crosses batches
    tp = TopicPartition(topic, 0)
    c = consumer(broker)
    try:
        found = c.offsets_for_times({tp: T0 + 12_500})
        assert (found[tp].offset, found[tp].timestamp) == (13, T0 + 13_000)
        found = c.offsets_for_times({tp: T0})
        assert (found[tp].offset, found[tp].timestamp) == (0, T0)
        found = c.offsets_for_times({tp: T0 + 5_000})
        assert (found[tp].offset, found[tp].timestamp) == (5, T0 + 5_000)
        assert c.offsets_for_times({tp: T0 + 60_000}) == {tp: None}  # later than every record
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 20}
        c.assign([tp])
        c.seek(tp, c.offsets_for_times({tp: T0 + 12_500})[tp].offset)
        assert as_tuples(poll_n(c, 7)) == expected(records[13:], 13)
    finally:
        c.close()


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
            for recs in c.poll(timeout_ms=300, max_records=6 - len(got)).values():
                got.extend(recs)
        assert as_tuples(got) == expected(records[:6])
        c.commit()  # the consumed position: offset 6
        assert c.committed(tp) == 6
    finally:
        c.close()

    own_broker.restart()
    produce(own_broker, topic, records[10:])  # the log continues at offset 10 after the restart

    c = consumer(own_broker, group_id=group, **GROUP_TIMEOUTS)
    try:
        assert c.committed(tp) == 6
        c.subscribe([topic])
        got = poll_n(c, 8, timeout=20)
        assert as_tuples(got) == expected(records[6:], 6)  # everything after the commit, nothing before
        c.commit({tp: OffsetAndMetadata(14, "done", -1)})
        assert c.committed(tp, metadata=True).metadata == "done"
    finally:
        c.close()


def test_default_producer_survives_broker_restart(own_broker, topic_name):
    """The idempotent producer keeps its producer id and sequence across the restart; the broker must still know
    them (Kafka rebuilds producer state from the log), so the next batch is neither refused nor duplicated."""
    topic = topic_name()
    create_topic(own_broker, topic)
    records = make_records(10, tag="live")
    p = KafkaProducer(bootstrap_servers=own_broker.bootstrap_servers, request_timeout_ms=10000, max_block_ms=10000)
    try:
        futures = [p.send(topic, value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in records[:5]]
        p.flush(timeout=15)
        offsets = [f.get(timeout=15).offset for f in futures]
        own_broker.restart()
        futures = [p.send(topic, value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in records[5:]]
        p.flush(timeout=30)
        offsets += [f.get(timeout=30).offset for f in futures]
    finally:
        p.close(timeout=5)
    assert offsets == list(range(10))
    assert as_tuples(read_all(own_broker, topic, 10)) == expected(records)


def test_delete_records_moves_log_start(broker, topic_name):
    topic = topic_name()
    create_topic(broker, topic)
    records = make_records(10, tag="del")
    produce(broker, topic, records)
    tp = TopicPartition(topic, 0)
    a = admin(broker)
    try:
        result = a.delete_records({tp: 4}, timeout_ms=10000)
        assert (result[tp]["error_code"], result[tp]["low_watermark"]) == (0, 4)
    finally:
        a.close()
    c = consumer(broker)
    try:
        assert c.beginning_offsets([tp]) == {tp: 4}
        assert c.end_offsets([tp]) == {tp: 10}
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert as_tuples(poll_n(c, 6)) == expected(records[4:], 4)
    finally:
        c.close()
    a = admin(broker)
    try:  # -1 = up to the high watermark: the partition is empty but keeps its offsets
        result = a.delete_records({tp: -1}, timeout_ms=10000)
        assert result[tp]["low_watermark"] == 10
    finally:
        a.close()
    c = consumer(broker)
    try:
        assert c.beginning_offsets([tp]) == {tp: 10} and c.end_offsets([tp]) == {tp: 10}
    finally:
        c.close()


def test_delete_topic(broker, topic_name):
    topic, other = topic_name("gone"), topic_name("kept")
    create_topic(broker, topic)
    create_topic(broker, other)
    produce(broker, topic, make_records(3))
    a = admin(broker)
    try:
        result = a.delete_topics([topic], timeout_ms=10000)
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        topics = a.list_topics()
        assert topic not in topics and other in topics
    finally:
        a.close()


class Member(threading.Thread):
    """One group member polling in its own thread, committing what it consumed; the test reads its state."""

    def __init__(self, broker, topic: str, group: str, name: str, auto_commit: bool):
        super().__init__(name=name, daemon=True)
        self.broker, self.topic, self.group, self.auto_commit = broker, topic, group, auto_commit
        self.lock = threading.Lock()
        self.records = []
        self.assigned = frozenset()
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.error = None

    def run(self):
        try:
            # auto commit (kafka-python's default) with a long interval commits only when partitions are revoked
            # (during the rebalance, at the generation being replaced, as Kafka accepts) and on close
            c = consumer(self.broker, group_id=self.group, client_id=self.name, enable_auto_commit=self.auto_commit,
                         auto_commit_interval_ms=60000, **GROUP_TIMEOUTS)
            self.ready.set()
            try:
                c.subscribe([self.topic])
                while not self.stopping.is_set():
                    batch = c.poll(timeout_ms=100)
                    with self.lock:
                        for recs in batch.values():
                            self.records.extend(recs)
                        self.assigned = frozenset(tp.partition for tp in c.assignment())
                    if batch and not self.auto_commit:
                        c.commit()
            finally:
                c.close()  # LeaveGroup: the other member takes over at once
        except BaseException as e:  # noqa: B036 — reported by the test thread
            self.error = e
            self.ready.set()

    def state(self):
        with self.lock:
            return self.assigned, list(self.records)

    def leave(self):
        self.stopping.set()
        self.join(15)
        assert not self.is_alive() and self.error is None, self.error


@pytest.mark.parametrize("commits", ["manual", "auto"])
def test_two_members_split_partitions_then_rebalance_on_leave(broker, topic_name, wait_for, commits):
    topic, group = topic_name("t"), topic_name("g")
    create_topic(broker, topic, partitions=4)
    a, b = (Member(broker, topic, group, f"kp-{n}", commits == "auto") for n in "ab")
    try:
        a.start()
        wait_for(lambda: a.state()[0] == {0, 1, 2, 3}, 20, "the first member holds all four partitions")
        b.start()
        wait_for(lambda: len(a.state()[0]) == 2 and len(b.state()[0]) == 2 and a.state()[0] | b.state()[0]
                 == {0, 1, 2, 3}, 25, "two members hold two partitions each")
        assert a.error is None and b.error is None
        split = {"a": a.state()[0], "b": b.state()[0]}

        sent = {}
        for p in range(4):
            sent[p] = make_records(3, tag=f"p{p}", start=10 * p)
            produce(broker, topic, sent[p], partition=p)

        def per_partition(records):
            return {p: [(r.offset, r.key, r.value) for r in records if r.partition == p] for p in range(4)}

        def want(parts, first):
            return {p: ([(first + i, k, v) for i, (k, v, _, _) in enumerate(sent[p])] if p in parts else [])
                    for p in range(4)}

        for who, m in (("a", a), ("b", b)):
            wait_for(lambda m=m: len(m.state()[1]) >= 6, 15, f"member {who} got the records of its partitions")
        assert per_partition(a.state()[1]) == want(split["a"], 0)
        assert per_partition(b.state()[1]) == want(split["b"], 0)

        b.leave()
        wait_for(lambda: a.state()[0] == {0, 1, 2, 3}, 20, "the remaining member holds all four partitions")
        before = len(a.state()[1])
        for p in range(4):
            more = make_records(2, tag=f"q{p}", start=10 * p + 3)
            produce(broker, topic, more, partition=p)
            sent[p] = more
        wait_for(lambda: len(a.state()[1]) >= before + 8, 15, "the remaining member got all the new records")
        time.sleep(0.3)
        # both committed what they read, so every partition resumes at offset 3: no record twice
        assert per_partition(a.state()[1][before:]) == want({0, 1, 2, 3}, 3)
    finally:
        for m in (a, b):
            if m.is_alive():
                m.stopping.set()
                m.join(15)
