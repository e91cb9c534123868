"""Apache Kafka 4.4.0's own command-line tools, run from the jars against both brokers (``target``: Kafka, then
kafkalog), and their answers compared where they are comparable.

Every expectation is Kafka's behaviour, derived from the workload each test runs (offsets, record contents, group
lag columns, config values, ACL bindings); the Kafka run of each test shows the expectation holds on the real
thing. Tests failing against kafkalog mark what kafkalog does not do yet: they are neither skipped nor xfailed.

The ACL tests need a broker with an authorizer: a module-scoped pair of their own (Kafka's StandardAuthorizer,
kafkalog's ``authorizer.class.name=kafkalog``, both with ``super.users=User:ANONYMOUS``), one at a time.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from .lab import KafkaBroker, KafkalogServer, LabError, Target, kafka_tool

LAB_TEST_DEADLINE_S = 120
T0 = (int(time.time()) - 600) * 1000  # record timestamps: in the past, within every broker's accepted window
UUID_B64 = re.compile(r"^[A-Za-z0-9_-]{22}$")


# -- helpers -----------------------------------------------------------------------------------------------------

def conf(bootstrap: str, **kw) -> dict:
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", **kw}


def produce(bootstrap: str, topic: str, records, partition: int = 0, **producer_conf) -> list[int]:
    """Produce ``records`` ((key, value, headers, timestamp_ms) tuples) to one partition, one batch per record so
    every broker sees the same batches: the offsets delivered."""
    offsets = []
    errors = []
    p = Producer(conf(bootstrap, **{"linger.ms": 0, "enable.idempotence": False, **producer_conf}))

    def done(err, msg):
        if err is not None:
            errors.append(err.str())
        else:
            offsets.append(msg.offset())

    for key, value, headers, ts in records:
        p.produce(topic, value=value, key=key, headers=headers or None, partition=partition,
                  timestamp=ts or 0, on_delivery=done)
        p.flush(30)
    assert p.flush(30) == 0, f"records to {topic} still queued after 30 s"
    assert not errors, f"produce to {topic} failed: {errors}"
    return offsets


def topic_names(bootstrap: str) -> set[str]:
    md = AdminClient(conf(bootstrap)).list_topics(timeout=10)
    return set(md.topics)


def broker_ids(bootstrap: str) -> set[int]:
    return set(AdminClient(conf(bootstrap)).list_topics(timeout=10).brokers)


def wait_until(fn, timeout: float = 15, what: str = ""):
    end = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def committed(bootstrap: str, group: str, topic: str, partitions=(0,)) -> dict[int, int]:
    c = Consumer(conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def iso_utc(ms: int) -> str:
    """A timestamp as kafka-consumer-groups' --to-datetime takes it: yyyy-MM-ddTHH:mm:ss.SSS plus a zone."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def out(r) -> str:
    return f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"


def table(stdout: str, first: str = "GROUP") -> list[dict]:
    """A kafka-consumer-groups table (whitespace-separated columns under a header starting with ``first``)."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.split()[0] == first:
            cols = ln.split()
            rows = []
            for row in lines[i + 1:]:
                if row.split()[0] == first:
                    break
                rows.append(dict(zip(cols, row.split())))
            return rows
    raise AssertionError(f"no table with a {first} header in:\n{stdout}")


def describe_topic(stdout: str) -> dict:
    """kafka-topics --describe: {"topic": {field: value}, "partitions": [{field: value}, ...]} (one topic)."""
    topic, parts = None, []
    for ln in stdout.splitlines():
        if not ln.strip():
            continue
        fields = {}
        for cell in ln.strip().split("\t"):
            k, _, v = cell.partition(":")
            fields[k.strip()] = v.strip()
        if "PartitionCount" in fields:
            topic = fields
        elif "Partition" in fields:
            parts.append(fields)
    assert topic is not None, f"no topic line in:\n{stdout}"
    return {"topic": topic, "partitions": parts}


CONFIG_LINE = re.compile(r"^\s+([\w.]+)=(.*?) sensitive=(true|false) synonyms=\{(.*)\}$")


def configs(stdout: str) -> dict[str, dict]:
    """kafka-configs --describe: {name: {"value", "sensitive", "synonyms": [(source, name, value), ...]}}."""
    found = {}
    for ln in stdout.splitlines():
        m = CONFIG_LINE.match(ln)
        if m:
            syn = []
            for s in filter(None, m.group(4).split(", ")):
                source, _, kv = s.partition(":")
                k, _, v = kv.partition("=")
                syn.append((source, k, v))
            found[m.group(1)] = {"value": m.group(2), "sensitive": m.group(3) == "true", "synonyms": syn}
    return found


def offsets_of(stdout: str) -> dict[tuple[str, int], int]:
    """kafka-get-offsets: {(topic, partition): offset} from its topic:partition:offset lines."""
    found = {}
    for ln in stdout.split():
        t, p, o = ln.rsplit(":", 2)
        found[(t, int(p))] = int(o)
    return found


ACL_RESOURCE = re.compile(r"ResourcePattern\(resourceType=(\w+), name=(.*?), patternType=(\w+)\)")
ACL_ENTRY = re.compile(r"\(principal=(.*?), host=(.*?), operation=(\w+), permissionType=(\w+)\)")


def acls(stdout: str) -> set[tuple]:
    """kafka-acls --list: {(resourceType, name, patternType, principal, host, operation, permissionType)}."""
    found, resource = set(), None
    for ln in stdout.splitlines():
        m = ACL_RESOURCE.search(ln)
        if m:
            resource = m.groups()
            continue
        m = ACL_ENTRY.search(ln)
        if m:
            assert resource is not None, stdout
            found.add((*resource, *m.groups()))
    return found


# -- kafka-topics ------------------------------------------------------------------------------------------------

def topic_configs(describe: dict) -> dict[str, str]:
    """The Configs field of kafka-topics --describe as a dict. Kafka 4.x's controller sets min.insync.replicas=1
    as a cluster-wide dynamic default (eligible leader replicas, KIP-966), so Kafka lists it for every topic: it
    is left out here when it is 1 (and must be 1 when listed)."""
    found = dict(kv.split("=", 1) for kv in filter(None, describe["topic"]["Configs"].split(",")))
    assert found.pop("min.insync.replicas", "1") == "1", describe
    return found


def test_topics_create_list_describe_alter_delete(target: Target, topic_name):
    bs, topic = target.bootstrap, topic_name()
    topics = ["kafka-topics", "--bootstrap-server", bs]
    r = target.tool(*topics, "--create", "--topic", topic, "--partitions", 3, "--replication-factor", 1,
                    "--config", "retention.ms=123456")
    assert r.stdout.strip() == f"Created topic {topic}.", out(r)

    r = target.tool(*topics, "--list")
    assert topic in r.stdout.split(), out(r)

    r = target.tool(*topics, "--describe", "--topic", topic)
    d = describe_topic(r.stdout)
    ids = {str(i) for i in broker_ids(bs)}
    assert d["topic"]["Topic"] == topic
    assert d["topic"]["PartitionCount"] == "3" and d["topic"]["ReplicationFactor"] == "1", d
    assert UUID_B64.match(d["topic"]["TopicId"]) and d["topic"]["TopicId"] != "AAAAAAAAAAAAAAAAAAAAAA", d
    assert topic_configs(d) == {"retention.ms": "123456"}, d
    assert [p["Partition"] for p in d["partitions"]] == ["0", "1", "2"], d
    for p in d["partitions"]:
        assert p["Leader"] in ids and p["Replicas"] == p["Leader"] and p["Isr"] == p["Leader"], (p, ids)

    target.tool(*topics, "--alter", "--topic", topic, "--partitions", 5)
    r = target.tool(*topics, "--describe", "--topic", topic)
    d = describe_topic(r.stdout)
    assert d["topic"]["PartitionCount"] == "5", d
    assert [p["Partition"] for p in d["partitions"]] == ["0", "1", "2", "3", "4"], d
    # the new partitions take records
    assert produce(bs, topic, [(b"k", b"in-p4", None, T0)], partition=4) == [0]

    # fewer partitions than it has is refused, the topic unchanged
    r = target.tool(*topics, "--alter", "--topic", topic, "--partitions", 2, check=False)
    assert r.returncode != 0 and "InvalidPartitionsException" in r.stdout + r.stderr, out(r)

    target.tool(*topics, "--delete", "--topic", topic)
    wait_until(lambda: topic not in topic_names(bs), what=f"{topic} gone from Metadata")
    r = target.tool(*topics, "--list")
    assert topic not in r.stdout.split(), out(r)


def test_topics_create_existing_topic(target: Target, topic_name):
    bs, topic = target.bootstrap, topic_name()
    topics = ["kafka-topics", "--bootstrap-server", bs]
    target.tool(*topics, "--create", "--topic", topic, "--partitions", 1)
    r = target.tool(*topics, "--create", "--topic", topic, "--partitions", 1, check=False)
    assert r.returncode == 1 and f"Topic '{topic}' already exists." in r.stdout, out(r)
    r = target.tool(*topics, "--create", "--topic", topic, "--partitions", 1, "--if-not-exists")
    assert r.returncode == 0 and r.stdout.strip() == "", out(r)


# -- kafka-console-producer / kafka-console-consumer -------------------------------------------------------------

CONSOLE_PRINT = ["--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
                 "--formatter-property", "print.offset=true", "--formatter-property", "print.partition=true"]


def console_produce(target: Target, topic: str, lines: list[str]):
    return target.tool("kafka-console-producer", "--bootstrap-server", target.bootstrap, "--topic", topic,
                       "--property", "parse.key=true", "--property", "parse.headers=true",
                       input="".join(line + "\n" for line in lines))


def console_consume(target: Target, topic: str, *args, max_messages: int):
    r = target.tool("kafka-console-consumer", "--bootstrap-server", target.bootstrap, "--topic", topic,
                    "--max-messages", max_messages, "--timeout-ms", 20000, *CONSOLE_PRINT, *args)
    assert f"Processed a total of {max_messages} messages" in r.stderr, out(r)
    return [ln.split("\t") for ln in r.stdout.splitlines()]


def test_console_producer_consumer_keys_headers_group(target: Target, topic_name):
    topic, group = topic_name(), topic_name("group")
    console_produce(target, topic, ["h1:a,h2:b\tk1\tv1", "h3:c\tk2\tvalue two", "h1:x\tk3\tv3"])
    rows = console_consume(target, topic, "--from-beginning", "--group", group, max_messages=3)
    assert rows == [["Partition:0", "Offset:0", "h1:a,h2:b", "k1", "v1"],
                    ["Partition:0", "Offset:1", "h3:c", "k2", "value two"],
                    ["Partition:0", "Offset:2", "h1:x", "k3", "v3"]], rows
    # the console consumer committed its position when it closed
    assert committed(target.bootstrap, group, topic) == {0: 3}

    console_produce(target, topic, ["h:1\tk4\tv4", "h:2\tk5\tv5"])
    rows = console_consume(target, topic, "--group", group, max_messages=2)  # resumes at the committed offset
    assert rows == [["Partition:0", "Offset:3", "h:1", "k4", "v4"],
                    ["Partition:0", "Offset:4", "h:2", "k5", "v5"]], rows
    assert committed(target.bootstrap, group, topic) == {0: 5}

    # the producer's records as a Kafka client reads them: keys, values and header pairs
    c = Consumer(conf(target.bootstrap, **{"group.id": topic_name("check"), "auto.offset.reset": "earliest",
                                           "enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        end = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.offset(), m.key(), m.value(), m.headers()))
    finally:
        c.close()
    assert got == [(0, b"k1", b"v1", [("h1", b"a"), ("h2", b"b")]), (1, b"k2", b"value two", [("h3", b"c")]),
                   (2, b"k3", b"v3", [("h1", b"x")]), (3, b"k4", b"v4", [("h", b"1")]),
                   (4, b"k5", b"v5", [("h", b"2")])], got


def test_console_consumer_partition_offset(target: Target, topic_name):
    """--partition/--offset reads from a given offset without a group."""
    topic = topic_name()
    produce(target.bootstrap, topic, [(f"k{i}".encode(), f"v{i}".encode(), None, T0 + i) for i in range(4)])
    rows = console_consume(target, topic, "--partition", 0, "--offset", 2, max_messages=2)
    assert rows == [["Partition:0", "Offset:2", "NO_HEADERS", "k2", "v2"],
                    ["Partition:0", "Offset:3", "NO_HEADERS", "k3", "v3"]], rows


# -- kafka-consumer-groups ---------------------------------------------------------------------------------------

def groups_tool(target: Target, *args, check_error: bool = True):
    """kafka-consumer-groups exits 0 even when it fails: an "Error:" line is its failure."""
    r = target.tool("kafka-consumer-groups", "--bootstrap-server", target.bootstrap, *args)
    if check_error:
        assert "Error" not in r.stdout, out(r)
    return r


def test_consumer_groups_list_describe_active_member(target: Target, topic_name):
    bs, topic, group, client_id = target.bootstrap, topic_name(), topic_name("group"), "lab-client"
    produce(bs, topic, [(None, b"x%d" % i, None, T0 + i) for i in range(5)])
    c = Consumer(conf(bs, **{"group.id": group, "client.id": client_id, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([topic])
        wait_until(lambda: (c.poll(0.2), c.assignment())[1], timeout=30, what="the member's assignment")
        c.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)

        r = groups_tool(target, "--list")
        assert group in r.stdout.split(), out(r)

        r = groups_tool(target, "--describe", "--group", group)
        rows = table(r.stdout)
        assert len(rows) == 1, out(r)
        row = rows[0]
        assert {k: row[k] for k in ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")} == {
            "GROUP": group, "TOPIC": topic, "PARTITION": "0", "CURRENT-OFFSET": "2", "LOG-END-OFFSET": "5",
            "LAG": "3"}, row
        assert row["CONSUMER-ID"].startswith(client_id + "-"), row
        assert row["HOST"] == "/127.0.0.1" and row["CLIENT-ID"] == client_id, row

        r = groups_tool(target, "--describe", "--group", group, "--members")
        rows = table(r.stdout)
        assert len(rows) == 1 and rows[0]["#PARTITIONS"] == "1" and rows[0]["CLIENT-ID"] == client_id, out(r)

        r = groups_tool(target, "--describe", "--group", group, "--state")
        m = re.search(rf"^{re.escape(group)}\s+(\S+)\s+\((-?\d+)\)\s+(\S+)\s+(\S+)\s+(\d+)\s*$", r.stdout, re.M)
        assert m, out(r)
        coordinator, node, strategy, state, members = m.groups()
        assert coordinator == bs and int(node) in broker_ids(bs), out(r)
        assert (strategy, state, members) == ("range", "Stable", "1"), out(r)
    finally:
        c.close()

    # the member left: the group is Empty, its committed offset stays
    r = groups_tool(target, "--describe", "--group", group)
    row = table(r.stdout)[0]
    assert (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"], row["CONSUMER-ID"]) == ("2", "5", "3", "-")
    assert f"Consumer group '{group}' has no active members." in r.stderr, out(r)


def test_consumer_groups_reset_offsets_and_delete(target: Target, topic_name):
    bs, topic, group = target.bootstrap, topic_name(), topic_name("group")
    produce(bs, topic, [(None, b"r%d" % i, None, T0 + i * 1000) for i in range(5)])
    c = Consumer(conf(bs, **{"group.id": group, "enable.auto.commit": False}))
    c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    c.close()
    assert committed(bs, group, topic) == {0: 4}

    # the first record at or after T0 + 2.5 s is offset 3
    r = groups_tool(target, "--reset-offsets", "--group", group, "--topic", topic,
                    "--to-datetime", iso_utc(T0 + 2500), "--execute")
    assert table(r.stdout) == [{"GROUP": group, "TOPIC": topic, "PARTITION": "0", "NEW-OFFSET": "3"}], out(r)
    assert committed(bs, group, topic) == {0: 3}

    # a dry run answers without committing
    r = groups_tool(target, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", 1, "--dry-run")
    assert table(r.stdout)[0]["NEW-OFFSET"] == "1", out(r)
    assert committed(bs, group, topic) == {0: 3}

    r = groups_tool(target, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert table(r.stdout)[0]["NEW-OFFSET"] == "0", out(r)
    assert committed(bs, group, topic) == {0: 0}

    r = groups_tool(target, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in r.stdout, out(r)
    r = groups_tool(target, "--list")
    assert group not in r.stdout.split(), out(r)
    assert committed(bs, group, topic) == {0: -1001}  # no committed offset (librdkafka's OFFSET_INVALID)


def test_consumer_groups_describe_unknown_group(target: Target, topic_name):
    group = topic_name("nobody")
    r = groups_tool(target, "--describe", "--group", group, check_error=False)
    assert f"GroupIdNotFoundException: Group {group} not found." in r.stdout, out(r)


# -- kafka-configs -----------------------------------------------------------------------------------------------

def summary(described: dict) -> dict:
    """{name: (value, sensitive, (source, value) of its first synonym)}: the synonym that decides the value (the
    rest of Kafka's synonym list, the broker defaults behind it, is not compared)."""
    return {k: (v["value"], v["sensitive"], (v["synonyms"][0][0], v["synonyms"][0][2]) if v["synonyms"] else None)
            for k, v in described.items()}


def test_configs_describe_alter_topic(target: Target, topic_name):
    bs, topic = target.bootstrap, topic_name()
    target.tool("kafka-topics", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", 1,
                "--config", "cleanup.policy=delete")
    describe = ["kafka-configs", "--bootstrap-server", bs, "--describe", "--entity-type", "topics",
                "--entity-name", topic]
    r = target.tool(*describe)
    assert f"Dynamic configs for topic {topic} are:" in r.stdout, out(r)
    assert summary(configs(r.stdout)) == {"cleanup.policy": ("delete", False, ("DYNAMIC_TOPIC_CONFIG", "delete"))}

    r = target.tool("kafka-configs", "--bootstrap-server", bs, "--alter", "--entity-type", "topics",
                    "--entity-name", topic, "--add-config", "retention.ms=86400000,segment.bytes=1048576")
    assert r.stdout.strip() == f"Completed updating config for topic {topic}.", out(r)
    got = summary(configs(target.tool(*describe).stdout))
    assert got == {"cleanup.policy": ("delete", False, ("DYNAMIC_TOPIC_CONFIG", "delete")),
                   "retention.ms": ("86400000", False, ("DYNAMIC_TOPIC_CONFIG", "86400000")),
                   "segment.bytes": ("1048576", False, ("DYNAMIC_TOPIC_CONFIG", "1048576"))}, got

    target.tool("kafka-configs", "--bootstrap-server", bs, "--alter", "--entity-type", "topics",
                "--entity-name", topic, "--delete-config", "segment.bytes")
    got = configs(target.tool(*describe).stdout)
    assert sorted(got) == ["cleanup.policy", "retention.ms"], got

    # a bad value is refused with Kafka's words
    r = target.tool("kafka-configs", "--bootstrap-server", bs, "--alter", "--entity-type", "topics",
                    "--entity-name", topic, "--add-config", "retention.ms=soon", check=False)
    assert r.returncode != 0 and "InvalidConfigurationException" in r.stdout + r.stderr, out(r)


# the topic keys kafkalog's README says it implements: their defaults should be Kafka's
README_TOPIC_KEYS = ["segment.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes", "index.interval.bytes",
                     "retention.ms", "retention.bytes", "file.delete.delay.ms", "flush.messages", "flush.ms",
                     "max.message.bytes", "message.timestamp.type", "message.timestamp.before.max.ms",
                     "message.timestamp.after.max.ms", "compression.type", "cleanup.policy"]


def test_configs_describe_all_defaults_match_kafka(targets, topic_name, compare):
    """A new topic's defaults, as --describe --all shows them, for the keys kafkalog implements: values and
    sensitivity (the synonym lists are not compared: Kafka lists none for some keys, e.g. retention.ms)."""
    answers = {}
    for name, t in targets.items():
        topic = topic_name(name)
        t.tool("kafka-topics", "--bootstrap-server", t.bootstrap, "--create", "--topic", topic, "--partitions", 1)
        r = t.tool("kafka-configs", "--bootstrap-server", t.bootstrap, "--describe", "--all", "--entity-type",
                   "topics", "--entity-name", topic)
        assert f"All configs for topic {topic} are:" in r.stdout, out(r)
        got = configs(r.stdout)
        answers[name] = {k: {"value": got[k]["value"], "sensitive": got[k]["sensitive"]} if k in got
                         else {"value": "<not described>"} for k in README_TOPIC_KEYS}
    assert all(v["value"] != "<not described>" for v in answers["kafka"].values()), answers["kafka"]
    compare(answers["kafka"], answers["kafkalog"], what="kafka-configs --describe --all, default topic configs")


# -- kafka-get-offsets / kafka-delete-records --------------------------------------------------------------------

# timestamps out of order: the largest is offset 1's
GET_OFFSETS_TS = [T0, T0 + 4000, T0 + 1000, T0 + 2000, T0 + 3000]


@pytest.mark.parametrize("time_arg, expected", [
    ("-1", 5),                 # latest: the log end offset
    ("-2", 0),                 # earliest
    (str(T0 + 1500), 1),       # the first offset whose timestamp is at or after it
    (str(T0 + 4001), None),    # after every record: no offset
    ("-3", 1),                 # max timestamp (KIP-734): the record with the largest timestamp
], ids=["latest", "earliest", "timestamp", "timestamp-after-all", "max-timestamp"])
def test_get_offsets(target: Target, topic_name, time_arg, expected):
    bs, topic = target.bootstrap, topic_name()
    produce(bs, topic, [(None, b"g%d" % i, None, ts) for i, ts in enumerate(GET_OFFSETS_TS)])
    r = target.tool("kafka-get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time", time_arg)
    assert offsets_of(r.stdout) == ({} if expected is None else {(topic, 0): expected}), out(r)


def test_delete_records_then_get_offsets(target: Target, topic_name, tmp_path):
    bs, topic = target.bootstrap, topic_name()
    target.tool("kafka-topics", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", 2)
    for p in (0, 1):
        produce(bs, topic, [(None, b"d%d" % i, None, T0 + i) for i in range(5)], partition=p)
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 3},
                                                             {"topic": topic, "partition": 1, "offset": -1}]}))
    r = target.tool("kafka-delete-records", "--bootstrap-server", bs, "--offset-json-file", spec)
    assert "Records delete operation completed:" in r.stdout, out(r)
    lows = dict(re.findall(r"partition: (\S+)\tlow_watermark: (\d+)", r.stdout))
    assert lows == {f"{topic}-0": "3", f"{topic}-1": "5"}, out(r)  # -1: up to the high watermark

    r = target.tool("kafka-get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time", "-2")
    assert offsets_of(r.stdout) == {(topic, 0): 3, (topic, 1): 5}, out(r)

    # an offset past the high watermark is refused for its partition
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 99}]}))
    r = target.tool("kafka-delete-records", "--bootstrap-server", bs, "--offset-json-file", spec, check=False)
    assert "OffsetOutOfRangeException" in r.stdout + r.stderr, out(r)


# -- perf tests --------------------------------------------------------------------------------------------------

PERF_RECORDS = 20_000
PERF_SIZE = 100


def test_producer_and_consumer_perf_test(target: Target, topic_name):
    bs, topic = target.bootstrap, topic_name()
    r = target.tool("kafka-producer-perf-test", "--bootstrap-server", bs, "--topic", topic, "--num-records",
                    PERF_RECORDS, "--record-size", PERF_SIZE, "--throughput", -1, timeout=90)
    m = re.search(r"^(\d+) records sent, [\d.]+ records/sec", r.stdout, re.M)
    assert m and int(m.group(1)) == PERF_RECORDS, out(r)
    r = target.tool("kafka-get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time", -1)
    assert offsets_of(r.stdout) == {(topic, 0): PERF_RECORDS}, out(r)

    r = target.tool("kafka-consumer-perf-test", "--bootstrap-server", bs, "--topic", topic, "--num-records",
                    PERF_RECORDS, "--timeout", 30000, timeout=90)
    lines = [ln for ln in r.stdout.splitlines() if "," in ln]
    assert len(lines) == 2 and lines[0].startswith("start.time"), out(r)
    row = dict(zip([c.strip() for c in lines[0].split(",")], [v.strip() for v in lines[1].split(",")]))
    assert int(row["data.consumed.in.nMsg"]) == PERF_RECORDS, row
    assert float(row["data.consumed.in.MB"]) == pytest.approx(PERF_RECORDS * PERF_SIZE / 2**20, abs=1e-3), row


# -- kafka-dump-log: both brokers' segment files, byte for byte Kafka's format ------------------------------------

def segment_of(server, topic: str, partition: int = 0):
    path = server.log_dir / f"{topic}-{partition}" / "00000000000000000000.log"
    assert path.is_file(), f"{server.name} has no {path}"
    return path


def test_dump_log_same_segments(targets, topic_name, compare):
    dumps = {}
    topic = topic_name()
    for name, t in targets.items():
        produce(t.bootstrap, topic, [(b"k%d" % i, b"plain-%d" % i, [("h", b"%d" % i)], T0 + i) for i in range(3)])
        produce(t.bootstrap, topic, [(b"z", b"gz" * 50, None, T0 + 10)], **{"compression.type": "gzip"})
        r = kafka_tool("kafka-dump-log", ["--files", segment_of(t.server, topic), "--print-data-log",
                                          "--deep-iteration"], timeout=60)
        assert r.returncode == 0, out(r)
        lines = [ln for ln in r.stdout.splitlines() if not ln.startswith("Dumping ")]
        assert sum(ln.startswith("| offset:") for ln in lines) == 4, out(r)
        dumps[name] = lines
    assert "compresscodec: gzip" in "\n".join(dumps["kafka"])
    compare(dumps["kafka"], dumps["kafkalog"], what="kafka-dump-log --print-data-log of the first segment")


# -- kafka-acls: a broker pair with an authorizer -----------------------------------------------------------------

@pytest.fixture(scope="module", params=["kafka", "kafkalog"], ids=["kafka", "kafkalog"])
def acl_target(request, tmp_path_factory):
    """A broker with an authorizer and ``super.users=User:ANONYMOUS`` (the PLAINTEXT principal), one at a time."""
    if request.param == "kafka":
        server = KafkaBroker(extra={"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                    "super.users": "User:ANONYMOUS"}, heap=["-Xmx512m", "-Xms128m"])
    else:
        server = KafkalogServer(overrides={"authorizer.class.name": "kafkalog", "super.users": "User:ANONYMOUS"})
    workdir = tmp_path_factory.mktemp(f"acl-{request.param}")
    try:
        server.start(workdir)
    except (LabError, OSError) as e:
        server.stop()
        pytest.fail(f"the {request.param} broker with an authorizer did not start: {e}\n{server.log_tail()}",
                    pytrace=False)
    try:
        yield Target(request.param, server.bootstrap, server)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_acls_list_add_remove(acl_target: Target, topic_name):
    t, bs = acl_target, acl_target.bootstrap
    topic, group_prefix = topic_name("topic"), topic_name("grp")
    acl = ["kafka-acls", "--bootstrap-server", bs]

    r = t.tool(*acl, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
               "--topic", topic)
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`" \
        in r.stdout, out(r)
    t.tool(*acl, "--add", "--deny-principal", "User:bob", "--operation", "Read", "--group", group_prefix,
           "--resource-pattern-type", "prefixed")
    t.tool(*acl, "--add", "--allow-principal", "User:carol", "--allow-host", "127.0.0.1", "--operation",
           "Describe", "--cluster")

    alice = {("TOPIC", topic, "LITERAL", "User:alice", "*", "READ", "ALLOW"),
             ("TOPIC", topic, "LITERAL", "User:alice", "*", "WRITE", "ALLOW")}
    bob = {("GROUP", group_prefix, "PREFIXED", "User:bob", "*", "READ", "DENY")}
    carol = {("CLUSTER", "kafka-cluster", "LITERAL", "User:carol", "127.0.0.1", "DESCRIBE", "ALLOW")}
    r = t.tool(*acl, "--list")
    assert alice | bob | carol <= acls(r.stdout), out(r)
    assert acls(t.tool(*acl, "--list", "--topic", topic).stdout) == alice
    # a prefixed pattern applies to the names under it: --resource-pattern-type match lists what applies to a name
    r = t.tool(*acl, "--list", "--group", group_prefix + "-x", "--resource-pattern-type", "match")
    assert acls(r.stdout) == bob, out(r)

    t.tool(*acl, "--remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic, "--force")
    assert acls(t.tool(*acl, "--list", "--topic", topic).stdout) == {
        ("TOPIC", topic, "LITERAL", "User:alice", "*", "READ", "ALLOW")}
    t.tool(*acl, "--remove", "--topic", topic, "--force")
    r = t.tool(*acl, "--list")
    assert not alice & acls(r.stdout) and bob | carol <= acls(r.stdout), out(r)


def test_acls_super_user_wins_over_deny(acl_target: Target, topic_name):
    """super.users bypass every ACL, a DENY on them included: ANONYMOUS still creates, writes and reads."""
    t, bs, topic = acl_target, acl_target.bootstrap, topic_name()
    t.tool("kafka-acls", "--bootstrap-server", bs, "--add", "--deny-principal", "User:ANONYMOUS", "--operation",
           "All", "--topic", topic)
    assert produce(bs, topic, [(b"k", b"v", None, T0)]) == [0]
    c = Consumer(conf(bs, **{"group.id": topic, "enable.auto.commit": False}))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 1)
    finally:
        c.close()


def test_acls_without_authorizer_is_refused(target: Target):
    """The session brokers have no authorizer: the ACL APIs answer SECURITY_DISABLED."""
    r = target.tool("kafka-acls", "--bootstrap-server", target.bootstrap, "--list", check=False)
    assert "SecurityDisabledException" in r.stdout + r.stderr or "No Authorizer is configured" in r.stdout + r.stderr, \
        out(r)


@pytest.mark.slow  # four short JVMs a broker (~3 s each on 2 cores)
def test_leader_election_and_reassign_partitions_tools(targets, topic_name, compare, tmp_path):
    """kafka-leader-election (preferred, every partition and one) and kafka-reassign-partitions (--list, --execute
    of a plan that keeps every replica where it is, --verify) say the same on both brokers: one node has nothing to
    elect and nothing to move."""
    topic = topic_name()
    outputs = {}
    for name, t in targets.items():
        bs = t.bootstrap
        t.tool("kafka-topics", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", 2,
               "--replication-factor", 1)
        node = min(broker_ids(bs))
        plan = tmp_path / f"plan-{name}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": [node], "log_dirs": ["any"]} for p in (0, 1)]}))
        runs = [t.tool("kafka-leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
                       "--topic", topic, "--partition", 1, check=False),
                t.tool("kafka-leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
                       "--all-topic-partitions", check=False),
                t.tool("kafka-reassign-partitions", "--bootstrap-server", bs, "--list", check=False),
                t.tool("kafka-reassign-partitions", "--bootstrap-server", bs, "--reassignment-json-file", plan,
                       "--execute", check=False),
                t.tool("kafka-reassign-partitions", "--bootstrap-server", bs, "--reassignment-json-file", plan,
                       "--verify", check=False)]
        outputs[name] = [(r.returncode, re.sub(rf"\b{node}\b", "<node>", re.sub(
            r'"log_dirs":\[[^\]]*\]', '"log_dirs":[<dir>]', r.stdout)).strip()) for r in runs]
    compare(outputs["kafka"], outputs["kafkalog"], what="leader election and reassignment tools")
    assert [code for code, _ in outputs["kafkalog"]] == [0] * 5, outputs["kafkalog"]
    assert "Valid replica already elected" in outputs["kafkalog"][0][1], outputs["kafkalog"]


@pytest.mark.slow  # three short JVMs a broker
def test_kafka_features_downgrade_and_upgrade(targets, compare):
    """kafka-features downgrade / upgrade of transaction.version prints the same on both brokers and describe shows
    the level; put back to 2 whatever happens (the session's other tests use it)."""
    outputs = {}
    try:
        for name, t in targets.items():
            bs = t.bootstrap
            runs = [t.tool("kafka-features", "--bootstrap-server", bs, "downgrade", "--feature",
                           "transaction.version=0", check=False),
                    t.tool("kafka-features", "--bootstrap-server", bs, "describe", check=False),
                    t.tool("kafka-features", "--bootstrap-server", bs, "upgrade", "--feature",
                           "transaction.version=2", check=False)]
            described = [re.sub(r"Epoch: \d+", "Epoch: <n>", line)  # Kafka's is a metadata offset, ours a time
                         for line in runs[1].stdout.splitlines() if "transaction.version" in line]
            outputs[name] = [(runs[0].returncode, runs[0].stdout.strip()), (runs[1].returncode, described),
                             (runs[2].returncode, runs[2].stdout.strip())]
    finally:
        for t in targets.values():
            t.tool("kafka-features", "--bootstrap-server", t.bootstrap, "upgrade", "--feature",
                   "transaction.version=2", check=False)
    compare(outputs["kafka"], outputs["kafkalog"], what="kafka-features downgrade / describe / upgrade")
    assert outputs["kafkalog"][0][0] == 0 and "FinalizedVersionLevel: 0" in outputs["kafkalog"][1][1][0], outputs
