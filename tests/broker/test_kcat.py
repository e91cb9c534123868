"""kcat (Debian's, librdkafka 2.0.2) against the broker over loopback, each run a subprocess with a timeout.

kcat has no admin requests, so topics come from Metadata auto-create and DeleteRecords is done by kafka-python's
admin; kcat cannot set a record's timestamp, so the timestamp tests read the ones the broker stored and, in a second
test, consume records that confluent-kafka produced at known timestamps. Output is kcat's JSON envelope (-J)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time

import pytest

from .conftest import children  # tests/children.py: a kcat member dies with this process

pytestmark = pytest.mark.usefixtures("deadline")

T0 = (int(time.time()) - 600) * 1000
# no "-o beginning" with -G: kcat would then seek every assigned partition to the start, ignoring the commits
GROUP_OPTS = ["-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000", "-X", "max.poll.interval.ms=10000",
              "-X", "auto.offset.reset=earliest"]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def kcat(kcat_path):
    """kcat(broker, *args, input=None) -> CompletedProcess (stdout/stderr text); fails the test on a non-zero exit."""
    def _run(broker, *args, input: str | None = None, timeout: float = 30, check: bool = True):
        cmd = [kcat_path, "-b", broker.bootstrap_servers, "-m", "10", "-X", "broker.address.family=v4", *args]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check:
            assert r.returncode == 0, f"{cmd} -> {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        return r
    return _run


def lines_of(n: int, tag: str, start: int = 0) -> list[tuple[str, str]]:
    """(key, value) pairs, printable (kcat's JSON output is text) and distinct per record."""
    return [(f"k{i}", f"{tag}-{i:05d}:" + "x" * (i % 7 * 10)) for i in range(start, start + n)]


def produce(kcat, broker, topic, pairs, *extra, partition: int = 0):
    before = int(time.time() * 1000)
    kcat(broker, "-P", "-t", topic, "-p", str(partition), "-K", ":", *extra,
         input="".join(f"{k}:{v}\n" for k, v in pairs))
    return before, int(time.time() * 1000)


def consume(kcat, broker, topic, *extra, partition: int | None = 0):
    part = ["-p", str(partition)] if partition is not None else []
    r = kcat(broker, "-C", "-t", topic, *part, "-e", "-J", *extra)
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def as_tuples(msgs):
    return [(m["offset"], m["key"], m["payload"], m.get("headers", [])) for m in msgs]


def expected(pairs, first: int = 0, headers=()):
    return [(first + i, k, v, list(headers)) for i, (k, v) in enumerate(pairs)]


def query(kcat, broker, topic, ts, partition: int = 0) -> int:
    r = kcat(broker, "-Q", "-t", f"{topic}:{partition}:{ts}", "-J")
    return json.loads(r.stdout)[topic][str(partition)]["offset"]


def test_produce_auto_creates_topic_and_metadata_lists_it(broker, kcat, topic_name):
    topic = topic_name()
    produce(kcat, broker, topic, lines_of(3, "auto"))
    md = json.loads(kcat(broker, "-L", "-t", topic, "-J").stdout)
    [t] = md["topics"]
    assert t["topic"] == topic and "error" not in t
    assert [(p["partition"], p["leader"]) for p in t["partitions"]] == [(0, md["brokers"][0]["id"])]
    assert [m["offset"] for m in consume(kcat, broker, topic, "-o", "beginning")] == [0, 1, 2]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_from_beginning(broker, kcat, topic_name, codec):
    topic = topic_name()
    pairs = lines_of(40, codec)
    before, after = produce(kcat, broker, topic, pairs, "-H", "h=1", "-H", f"codec={codec}",
                            "-X", f"compression.codec={codec}", "-X", "linger.ms=5")
    got = consume(kcat, broker, topic, "-o", "beginning")
    assert as_tuples(got) == expected(pairs, headers=["h", "1", "codec", codec])
    assert {m["tstype"] for m in got} == {"create"}
    # kcat stamps records itself (CreateTime); the broker keeps them as sent
    assert all(before <= m["ts"] <= after for m in got), (before, after, [m["ts"] for m in got])
    assert [m["ts"] for m in got] == sorted(m["ts"] for m in got)


def test_timestamp_query_and_consume_from_timestamp(broker, kcat, topic_name):
    topic = topic_name()
    first, second = lines_of(5, "ts"), lines_of(5, "ts", start=5)
    produce(kcat, broker, topic, first)
    time.sleep(0.005)  # the second run's records get a later millisecond than the first run's
    produce(kcat, broker, topic, second)
    got = consume(kcat, broker, topic, "-o", "beginning")
    ts = [m["ts"] for m in got]
    assert as_tuples(got) == expected(first + second) and max(ts[:5]) < ts[5], ts
    assert query(kcat, broker, topic, ts[5]) == 5
    assert query(kcat, broker, topic, ts[0]) == 0
    assert query(kcat, broker, topic, ts[9] + 1) == -1  # after the last record: the end (-1)
    assert query(kcat, broker, topic, -2) == 0  # EARLIEST
    assert query(kcat, broker, topic, -1) == 10  # LATEST
    assert as_tuples(consume(kcat, broker, topic, "-o", f"s@{ts[5]}")) == expected(second, 5)


def test_known_timestamps_from_another_client(broker, kcat, topic_name):
    from confluent_kafka import Producer
    topic = topic_name()
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "broker.address.family": "v4"})
    for i in range(20):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp=T0 + i * 1000, partition=0)
    assert p.flush(15) == 0
    assert query(kcat, broker, topic, T0 + 12_500) == 13
    assert query(kcat, broker, topic, T0 + 5_000) == 5
    got = consume(kcat, broker, topic, "-o", f"s@{T0 + 12_500}")
    assert [(m["offset"], m["key"], m["payload"], m["ts"]) for m in got] == [
        (i, f"k{i}", f"v{i}", T0 + i * 1000) for i in range(13, 20)]
    got = consume(kcat, broker, topic, "-o", f"s@{T0 + 3_000}", "-o", f"e@{T0 + 6_000}")
    assert [m["offset"] for m in got] == [3, 4, 5]


def test_group_commit_then_broker_restart_resumes_at_commit(own_broker, kcat, topic_name):
    topic, group = topic_name("t"), topic_name("g")
    pairs = lines_of(14, "grp")
    produce(kcat, own_broker, topic, pairs[:10])
    # -c 6: kcat stops after 6 records and closes the consumer, which commits the position (auto commit)
    r = kcat(own_broker, "-G", group, "-c", "6", "-J", *GROUP_OPTS, topic)
    got = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert as_tuples(got) == expected(pairs[:6])

    own_broker.restart()
    produce(kcat, own_broker, topic, pairs[10:])
    r = kcat(own_broker, "-G", group, "-e", "-J", *GROUP_OPTS, topic)
    got = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert as_tuples(got) == expected(pairs[6:], 6)  # everything after the commit, nothing before


def test_delete_records_moves_the_start_kcat_sees(broker, kcat, topic_name):
    from kafka import KafkaAdminClient, TopicPartition
    topic = topic_name()
    pairs = lines_of(10, "del")
    produce(kcat, broker, topic, pairs)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10000)
    try:
        tp = TopicPartition(topic, 0)
        assert admin.delete_records({tp: 4}, timeout_ms=10000)[tp]["low_watermark"] == 4
    finally:
        admin.close()
    assert query(kcat, broker, topic, -2) == 4
    assert as_tuples(consume(kcat, broker, topic, "-o", "beginning")) == expected(pairs[4:], 4)
    # below the log start: librdkafka gets OFFSET_OUT_OF_RANGE and resets to the start (auto.offset.reset)
    got = consume(kcat, broker, topic, "-o", "2", "-X", "auto.offset.reset=earliest")
    assert [m["offset"] for m in got] == list(range(4, 10))


class KcatMember:
    """A `kcat -G` process; threads collect its JSON records (stdout) and its assignments (stderr).

    Auto commit with a long interval: positions are committed only when partitions are revoked (during the
    rebalance, at the generation being replaced, as Kafka accepts) and when the consumer closes.
    """

    ASSIGNED = re.compile(r"rebalanced \(memberid [^)]*\): assigned: (.*)$")

    def __init__(self, kcat_path, broker, group, topic):
        self.proc = children.popen(
            [kcat_path, "-b", broker.bootstrap_servers, "-X", "broker.address.family=v4", "-G", group, "-u", "-J",
             *GROUP_OPTS, "-X", "auto.commit.interval.ms=60000", topic],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        self.records, self.assigned, self.stderr = [], frozenset(), []
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_out(self):
        for line in self.proc.stdout:
            if line.strip():
                with self.lock:
                    self.records.append(json.loads(line))

    def _read_err(self):
        for line in self.proc.stderr:
            with self.lock:
                self.stderr.append(line)
                m = self.ASSIGNED.search(line)
                if m:
                    self.assigned = frozenset(int(p) for p in re.findall(r"\[(\d+)\]", m.group(1)))
                elif "revoked:" in line:
                    self.assigned = frozenset()

    def state(self):
        with self.lock:
            return self.assigned, list(self.records)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # kcat closes the consumer: final commit + LeaveGroup
        try:
            rc = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(5)
        for t in self._threads:
            t.join(5)
        return rc


def test_two_members_split_partitions_then_rebalance_on_leave(broker, kcat, kcat_path, topic_name, wait_for):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    topic, group = topic_name("t"), topic_name("g")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(topic, 4, 1)], timeout_ms=10000)
    finally:
        admin.close()
    a = KcatMember(kcat_path, broker, group, topic)
    b = None
    try:
        wait_for(lambda: a.state()[0] == {0, 1, 2, 3}, 20, "the first member holds all four partitions")
        b = KcatMember(kcat_path, broker, group, topic)
        wait_for(lambda: len(a.state()[0]) == 2 and len(b.state()[0]) == 2
                 and a.state()[0] | b.state()[0] == {0, 1, 2, 3}, 25, "two members hold two partitions each")
        parts = {"a": a.state()[0], "b": b.state()[0]}
        sent = {p: lines_of(3, f"p{p}", start=10 * p) for p in range(4)}
        for p in range(4):
            produce(kcat, broker, topic, sent[p], partition=p)

        def per_partition(msgs):
            return {p: [(m["offset"], m["key"], m["payload"]) for m in msgs if m["partition"] == p] for p in range(4)}

        def want(ps, first):
            return {p: ([(first + i, k, v) for i, (k, v) in enumerate(sent[p])] if p in ps else []) for p in range(4)}

        wait_for(lambda: len(a.state()[1]) + len(b.state()[1]) >= 12, 15, "both members got their records")
        assert per_partition(a.state()[1]) == want(parts["a"], 0)
        assert per_partition(b.state()[1]) == want(parts["b"], 0)

        assert b.stop() == 0, "".join(b.stderr)
        wait_for(lambda: a.state()[0] == {0, 1, 2, 3}, 20, "the remaining member holds all four partitions")
        before = len(a.state()[1])
        for p in range(4):
            sent[p] = lines_of(2, f"q{p}", start=10 * p + 3)
            produce(kcat, broker, topic, sent[p], partition=p)
        wait_for(lambda: len(a.state()[1]) >= before + 8, 15, "the remaining member got the new records")
        time.sleep(0.3)
        # a's commit on revoke and b's on close were accepted: every partition resumes at 3, no record twice
        assert per_partition(a.state()[1][before:]) == want({0, 1, 2, 3}, 3)
    finally:
        for m in (a, b):
            if m is not None:
                m.stop()
