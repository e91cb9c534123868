"""The Python clients of kafkalog's suite against Apache Kafka 4.4.0 and `kafkalog serve`, answers compared.

kafka-python, confluent-kafka (librdkafka), aiokafka and kcat (Debian's, librdkafka 2.0.2) each run the same five
workloads against both brokers of the lab (``targets``); each workload returns what the client saw as plain data
(dicts, lists, tuples) and ``assert_same`` compares Kafka's answer with kafkalog's field by field. Kafka's answer is
also checked against what the workload sent (so a workload that went wrong on both brokers the same way still fails).

1. produce: keyed records with headers and CreateTime timestamps to a 3-partition topic (the client's partitioner
   picks the partition), read back per partition (offset, key, value, headers, timestamp and its type, the batch's
   leader epoch where the client shows it), watermarks and log start offsets; a LogAppendTime topic whose
   timestamps must fall inside the produce window.
2. list offsets: earliest, latest, max timestamp and by timestamp (before, at, between and after the records, a
   late record out of time order, an empty partition), and consuming from a timestamp (kcat: -Q, -o s@ts, e@ts).
3. groups: consume + commit, the group listed and described while its member runs (state, protocol type, assignor,
   members, assignments), Empty after close, the committed offsets, a new member resuming from the commit, delete
   (NON_EMPTY_GROUP while a member is in it, then OK, then GROUP_ID_NOT_FOUND, and for a group never used).
4. admin: describe_configs (values, sources, synonyms of a few keys), incremental and legacy alter configs,
   create_partitions (and the error for shrinking), delete_records, describe_cluster, describe_topics.
5. errors: producing to a partition the topic does not have (every client refuses it from the metadata, so what is
   compared is that both brokers' metadata lead it to the same refusal), fetching an offset out of range under each
   reset policy, creating a topic that exists, replication factor 3 on one broker, an illegal name, zero partitions.

Each client does what it can itself: kcat has no admin requests, so its topics are made (and its groups deleted)
with confluent-kafka's AdminClient and its "admin" workload is what kcat shows of them (-L, -Q, -C); kcat cannot
set a record's timestamp or per-record headers, so its CreateTime timestamps are compared as "inside the produce
window". aiokafka has no DeleteGroups: its groups are deleted with confluent-kafka's AdminClient.

Fields where the brokers legitimately differ are left out with ``ignore=`` and a reason (cluster id, ports, topic
ids, member ids, free-text error messages, fields of protocol versions kafkalog does not advertise).
"""

from __future__ import annotations

import asyncio
import enum
import json
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

import pytest

from .lab import children  # tests/children.py: a kcat member dies with this process

LAB_TEST_DEADLINE_S = 100
CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka", "kcat")
T0 = (int(time.time()) - 600) * 1000  # a whole second in the recent past: CreateTime timestamps T0 + i s
GROUP_TIMEOUTS_MS = {"session": 6000, "heartbeat": 1000, "max_poll": 10000}
CONFIG_KEYS = ("cleanup.policy", "max.message.bytes", "message.timestamp.type", "retention.bytes", "retention.ms",
               "segment.bytes", "segment.ms")
TS_QUERIES = {"before": T0 - 5000, "first": T0, "between": T0 + 4500, "exact": T0 + 5000, "last": T0 + 9000,
              "after": T0 + 9001}
WAIT_S = 20  # how long a workload waits for records / a group before it gives up and answers what it has


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple
    ts: int | str  # CreateTime ms; kcat's records (stamped by kcat itself): "in produce window"


def keyed_records(tag: str, n: int = 12) -> list[Rec]:
    """Keys repeat (5 distinct) so the partitioner sends each key to one partition; the last value is null."""
    return [Rec(b"key-%d" % (i % 5), None if i == n - 1 else b"%s-%02d" % (tag.encode(), i),
                (("seq", b"%d" % i), ("tag", tag.encode())), T0 + i * 1000) for i in range(n)]


def timed_records(n: int = 10) -> list[Rec]:
    return [Rec(b"t%d" % i, b"ts-%02d" % i, (), T0 + i * 1000) for i in range(n)]


def offsets_records() -> list[Rec]:
    """Ten records a second apart, then a late one (timestamp between the 3rd and 4th): the largest timestamp is not
    the last offset's, and a search by time must not stop at the late record."""
    return [*timed_records(10), Rec(b"late", b"ts-late", (), T0 + 2500)]


def changed(describe, before, looks: int = 50):
    """describe() again until its answer differs from ``before`` (at most ``looks`` times, 0.1 s apart): Apache Kafka
    applies a config change through its metadata log, so a DescribeConfigs right after the AlterConfigs answer may
    still show the old value (kafkalog's answer is at once). A change that never shows is left to the comparison."""
    got = describe()
    for _ in range(looks):
        if got != before:
            return got
        time.sleep(0.1)
        got = describe()
    return got


async def changed_async(describe, before, looks: int = 50):
    got = await describe()
    for _ in range(looks):
        if got != before:
            return got
        await asyncio.sleep(0.1)
        got = await describe()
    return got


def plain(obj):
    """A client's answer object as plain data: enums by name, namedtuples/objects as dicts, sets sorted."""
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, dict):
        return {plain_key(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((plain(v) for v in obj), key=repr)
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return obj
    if type(obj).__name__ == "TopicPartition" and hasattr(obj, "leader_epoch"):  # confluent-kafka's (no __dict__)
        return {"topic": obj.topic, "partition": obj.partition, "offset": obj.offset,
                "leader_epoch": obj.leader_epoch, "metadata": obj.metadata,
                "error": None if obj.error is None else obj.error.name()}
    if hasattr(obj, "__dict__"):
        return {k: plain(v) for k, v in vars(obj).items() if not k.startswith("_")}
    if hasattr(obj, "__slots__"):
        return {k: plain(getattr(obj, k)) for k in obj.__slots__ if not k.startswith("_")}
    return repr(obj)


def plain_key(k):
    """A dict key as plain data that stays hashable: a TopicPartition becomes (topic, partition)."""
    if isinstance(k, enum.Enum):
        return k.name
    if isinstance(k, tuple):
        return tuple(plain_key(x) for x in k)
    if isinstance(k, (str, bytes, int, float, bool)) or k is None:
        return k
    if hasattr(k, "topic") and hasattr(k, "partition"):
        return (k.topic, k.partition)
    return repr(k)


def topic_id_shown(topic_id) -> str:
    """Topic ids differ between brokers by nature (KIP-516: random per topic); whether the client sees one does not."""
    if topic_id is None:
        return "no topic id"
    text = str(topic_id)
    if text in ("AAAAAAAAAAAAAAAAAAAAAA", "00000000-0000-0000-0000-000000000000"):
        return "zero topic id (Uuid.ZERO_UUID)"
    return "a topic id"


def error_name(exc: BaseException | None) -> str | None:
    """A client exception as Kafka's error name (kafka-python/aiokafka class names, librdkafka's KafkaError)."""
    if exc is None:
        return None
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "name") and callable(args[0].name):  # confluent_kafka.KafkaException(KafkaError)
        return args[0].name()
    return type(exc).__name__


# -- kafka-python -------------------------------------------------------------------------------------------------

class KafkaPython:
    name = "kafka-python"

    @staticmethod
    def admin(b):
        from kafka import KafkaAdminClient
        return KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=10000, client_id="lab-kp-admin")

    @staticmethod
    def producer(b, **kw):
        from kafka import KafkaProducer
        return KafkaProducer(bootstrap_servers=b, request_timeout_ms=10000, max_block_ms=10000, linger_ms=5, **kw)

    @staticmethod
    def consumer(b, **kw):
        from kafka import KafkaConsumer
        kw.setdefault("enable_auto_commit", False)
        kw.setdefault("auto_offset_reset", "earliest")
        return KafkaConsumer(bootstrap_servers=b, request_timeout_ms=11000, fetch_max_wait_ms=200, **kw)

    def create(self, b, *topics, raise_errors=True):
        """topics: (name, partitions, replication, configs) -> [{topic, error (code), error_message}]."""
        from kafka.admin import NewTopic
        a = self.admin(b)
        try:
            out = []
            for name, parts, rf, configs in topics:
                r = a.create_topics([NewTopic(name, parts, rf, topic_configs=configs or {})], timeout_ms=10000,
                                    raise_errors=raise_errors)
                out += [{"topic": t["name"], "error": t["error_code"], "error_message": t["error_message"]}
                        for t in r["topics"]]
            return out
        finally:
            a.close()

    def send_all(self, b, topic, recs, partition=None):
        p = self.producer(b)
        try:
            futs = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=partition,
                           timestamp_ms=r.ts) for r in recs]
            p.flush(15)
            return [f.get(15) for f in futs]
        finally:
            p.close(5)

    def read_partitions(self, b, topic, partitions):
        from kafka import TopicPartition
        c = self.consumer(b)
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            low, high = c.beginning_offsets(tps), c.end_offsets(tps)
            c.assign(tps)
            c.seek_to_beginning(*tps)
            got = {p: [] for p in partitions}
            end = time.monotonic() + WAIT_S
            while sum(map(len, got.values())) < sum(high[tp] - low[tp] for tp in tps) and time.monotonic() < end:
                for tp, recs in c.poll(timeout_ms=300).items():
                    got[tp.partition] += [{"offset": r.offset, "key": r.key, "value": r.value,
                                           "headers": [tuple(h) for h in r.headers], "timestamp": r.timestamp,
                                           "timestamp_type": r.timestamp_type, "leader_epoch": r.leader_epoch}
                                          for r in recs]
            return got, {tp.partition: (low[tp], high[tp]) for tp in tps}
        finally:
            c.close()

    def produce_read(self, b, topic, lat):
        created = self.create(b, (topic, 3, 1, None), (lat, 1, 1, {"message.timestamp.type": "LogAppendTime"}))
        recs = keyed_records("kp")
        meta = self.send_all(b, topic, recs)
        delivered = [(m.partition, m.offset, m.timestamp) for m in meta]
        before = now_ms()
        lat_meta = self.send_all(b, lat, recs[:3])
        after = now_ms()
        records, marks = self.read_partitions(b, topic, [0, 1, 2])
        lat_records, _ = self.read_partitions(b, lat, [0])
        return {"created": created, "delivered": delivered, "records": records, "watermarks": marks,
                "lat_delivered": [(m.partition, m.offset, before <= m.timestamp <= after) for m in lat_meta],
                "lat_records": lat_view(lat_records[0], before, after)}, recs

    def list_offsets(self, b, topic):
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec
        self.create(b, (topic, 2, 1, None))
        recs = offsets_records()
        self.send_all(b, topic, recs[:5], partition=0)
        self.send_all(b, topic, recs[5:], partition=0)  # a second batch: the time search crosses batches
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        c = self.consumer(b)
        try:
            def at(tp, ts):
                found = c.offsets_for_times({tp: ts})[tp]
                return None if found is None else (found.offset, found.timestamp)
            ans = {"earliest": {0: c.beginning_offsets([tp0])[tp0], 1: c.beginning_offsets([tp1])[tp1]},
                   "latest": {0: c.end_offsets([tp0])[tp0], 1: c.end_offsets([tp1])[tp1]},
                   "by_time": {k: at(tp0, ts) for k, ts in TS_QUERIES.items()},
                   "by_time_empty_partition": at(tp1, T0)}
            c.assign([tp0])
            c.seek(tp0, c.offsets_for_times({tp0: TS_QUERIES["between"]})[tp0].offset)
            ans["consumed_from_time"] = [r.offset for r in poll_records(c, 6)]
        finally:
            c.close()
        a = self.admin(b)
        try:
            specs = {"earliest": OffsetSpec.EARLIEST, "latest": OffsetSpec.LATEST,
                     "max_timestamp": OffsetSpec.MAX_TIMESTAMP, "exact": TS_QUERIES["exact"],
                     "between": TS_QUERIES["between"], "after": TS_QUERIES["after"]}
            ans["admin"] = {}
            for k, spec in specs.items():
                r = a.list_partition_offsets({tp0: spec})[tp0]
                ans["admin"][k] = {"offset": r.offset, "timestamp": r.timestamp, "leader_epoch": r.leader_epoch}
        finally:
            a.close()
        return ans, recs

    def groups(self, b, topic, group):
        from kafka import TopicPartition
        self.create(b, (topic, 2, 1, None))
        recs = timed_records(8)
        for p in (0, 1):
            self.send_all(b, topic, recs[p * 3:p * 3 + 3], partition=p)
        gt = dict(session_timeout_ms=GROUP_TIMEOUTS_MS["session"], heartbeat_interval_ms=GROUP_TIMEOUTS_MS["heartbeat"],
                  max_poll_interval_ms=GROUP_TIMEOUTS_MS["max_poll"])
        ans = {}
        a = self.admin(b)
        try:
            c = self.consumer(b, group_id=group, client_id="lab-kp-member", **gt)
            try:
                c.subscribe([topic])
                ans["consumed"] = sorted((r.partition, r.offset) for r in poll_records(c, 6))
                c.commit()
                ans["running"] = self.group_view(a, group)
                ans["delete_non_empty"] = self.delete_groups(a, group)
            finally:
                c.close()
            ans["after_close"] = self.group_view(a, group)
            ans["committed"] = self.offsets_of(a, group)
            for p in (0, 1):
                self.send_all(b, topic, [recs[6 + p]], partition=p)
            c = self.consumer(b, group_id=group, client_id="lab-kp-member2", **gt)
            try:
                c.subscribe([topic])
                ans["resumed"] = sorted((r.partition, r.offset) for r in poll_records(c, 2))
                c.commit()
                ans["committed_by_resumer"] = {p: c.committed(TopicPartition(topic, p)) for p in (0, 1)}
            finally:
                c.close()
            ans["delete"] = self.delete_groups(a, group)
            ans["delete_again"] = self.delete_groups(a, group)
            ans["delete_unknown"] = self.delete_groups(a, group + "-never-used")
            ans["listed_after_delete"] = [g for g in a.list_groups() if g["group_id"] == group]
        finally:
            a.close()
        return ans, recs

    @staticmethod
    def group_view(a, group):
        listed = [g for g in a.list_groups() if g["group_id"] == group]
        described = a.describe_groups([group])[group]
        return {"listed": plain(listed), "described": plain(described)}

    @staticmethod
    def offsets_of(a, group):
        got = a.list_group_offsets({group: None})[group]
        return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in sorted(got.items())}

    @staticmethod
    def delete_groups(a, group):
        return {g: err if isinstance(err, str) else getattr(err, "__name__", type(err).__name__)
                for g, err in a.delete_groups([group]).items()}

    def admin_ops(self, b, topic):
        from kafka import TopicPartition
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
        self.create(b, (topic, 1, 1, {"retention.ms": "86400000"}))
        self.send_all(b, topic, timed_records(), partition=0)
        a = self.admin(b)
        ans = {}
        try:
            def describe():
                res = ConfigResource(ConfigResourceType.TOPIC, topic, {k: None for k in CONFIG_KEYS})
                got = a.describe_configs([res], include_synonyms=True, config_filter="all")
                return plain(got["topic"][topic])
            ans["configs_created"] = describe()
            res = ConfigResource(ConfigResourceType.TOPIC, topic, {
                "retention.ms": (AlterConfigOp.SET, "7200000"), "max.message.bytes": (AlterConfigOp.SET, "2000000"),
                "cleanup.policy": (AlterConfigOp.APPEND, "compact"), "segment.bytes": (AlterConfigOp.DELETE, None)})
            ans["incremental_alter"] = plain(a.alter_configs([res], incremental=True))
            ans["configs_incremental"] = changed(describe, ans["configs_created"])
            res = ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "3600000"})
            ans["legacy_alter"] = plain(a.alter_configs([res], incremental=False, raise_on_unknown=False))
            ans["configs_legacy"] = changed(describe, ans["configs_incremental"])
            ans["create_partitions"] = plain(a.create_partitions({topic: 3}, raise_errors=False))
            ans["shrink_partitions"] = plain(a.create_partitions({topic: 2}, raise_errors=False))
            tp = TopicPartition(topic, 0)
            ans["delete_records"] = plain(a.delete_records({tp: 4}, timeout_ms=10000)[tp])
            ans["cluster"] = plain(a.describe_cluster())
            ans["topics"] = [{**t, "topic_id": topic_id_shown(t.get("topic_id"))}
                             for t in plain(a.describe_topics([topic]))]
        finally:
            a.close()
        c = self.consumer(b)
        try:
            tps = [TopicPartition(topic, p) for p in range(3)]
            ans["watermarks"] = {tp.partition: (lo, c.end_offsets([tp])[tp])
                                 for tp, lo in c.beginning_offsets(tps).items()}
        finally:
            c.close()
        return ans

    def errors(self, b, topic, names):
        from kafka import TopicPartition
        ans = {"creates": self.create(b, (topic, 1, 1, None), (topic, 1, 1, None), (names["rf3"], 1, 3, None),
                                      ("bad name!", 1, 1, None), (names["zero"], 0, 1, None), raise_errors=False)}
        self.send_all(b, topic, timed_records(3), partition=0)
        p = self.producer(b)
        try:
            try:
                ans["produce_partition_5"] = ("ok", plain(p.send(topic, b"x", partition=5).get(10)))
            except Exception as e:  # noqa: BLE001 — the client's reaction is the answer
                ans["produce_partition_5"] = (error_name(e), str(e))
        finally:
            p.close(5)
        ans["fetch_out_of_range"] = {}
        for reset in ("none", "earliest", "latest"):
            c = self.consumer(b, auto_offset_reset=reset)
            tp = TopicPartition(topic, 0)
            try:
                c.assign([tp])
                c.seek(tp, 100)
                try:
                    got = [r.offset for r in poll_records(c, 3, timeout=1.5)]
                    ans["fetch_out_of_range"][reset] = {"records": got, "position": c.position(tp)}
                except Exception as e:  # noqa: BLE001
                    ans["fetch_out_of_range"][reset] = {"error": error_name(e)}
            finally:
                c.close()
        return ans


def poll_records(c, n, timeout: float = WAIT_S, settle_ms: int = 300):
    """kafka-python: what poll() returns until n records came (and one more short poll to catch extras)."""
    out = []
    end = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        for recs in c.poll(timeout_ms=300).values():
            out.extend(recs)
    if len(out) >= n:
        for recs in c.poll(timeout_ms=settle_ms).values():
            out.extend(recs)
    return out


def lat_view(records, before, after):
    """LogAppendTime records: what must hold whatever the clock said (type, in the produce window, offsets)."""
    return [{"offset": r["offset"], "key": r["key"], "timestamp_type": r["timestamp_type"],
             "in_window": before <= r["timestamp"] <= after} for r in records]


# -- confluent-kafka (librdkafka) ---------------------------------------------------------------------------------

def ck_conf(b, **kw):
    return {"bootstrap.servers": b, "broker.address.family": "v4", "socket.timeout.ms": 10000, **kw}


def ck_error(exc):
    """A librdkafka error (from a future or a message) as {error (name), error_message}."""
    err = exc.args[0] if isinstance(exc, Exception) and exc.args and hasattr(exc.args[0], "code") else exc
    if hasattr(err, "name") and callable(err.name):
        return {"error": err.name(), "error_message": err.str()}
    return {"error": type(exc).__name__, "error_message": str(exc)}


def ck_result(fut, timeout: float = 20):
    """A future's result as plain data, or its error as {error, error_message}."""
    try:
        return plain(fut.result(timeout=timeout))
    except Exception as e:  # noqa: BLE001 — the error is the answer
        return ck_error(e)


class ConfluentKafka:
    name = "confluent-kafka"

    @staticmethod
    def admin(b):
        from confluent_kafka.admin import AdminClient
        return AdminClient(ck_conf(b))

    def create(self, b, *topics):
        """topics: (name, partitions, replication, configs) -> [{topic, error, error_message}] (error None: made)."""
        from confluent_kafka.admin import NewTopic
        a = self.admin(b)
        out = []
        for name, parts, rf, configs in topics:
            fs = a.create_topics([NewTopic(name, num_partitions=parts, replication_factor=rf, config=configs or {})],
                                 operation_timeout=10, request_timeout=10)
            r = ck_result(fs[name])
            out.append({"topic": name, **(r if isinstance(r, dict) else {"error": None, "error_message": None})})
        return out

    @staticmethod
    def send_all(b, topic, recs, partition=None):
        """Produce, then the delivery reports in send order: (error, partition, offset, (ts type, ts))."""
        from confluent_kafka import Producer
        p = Producer(ck_conf(b, **{"linger.ms": 5, "message.timeout.ms": 15000}))
        reports = {}

        def on_delivery(i):
            def cb(err, msg):
                reports[i] = (None if err is None else err.name(), msg.partition(), msg.offset(), msg.timestamp())
            return cb

        for i, r in enumerate(recs):
            kw = {"partition": partition} if partition is not None else {}
            p.produce(topic, value=r.value, key=r.key, headers=list(r.headers), on_delivery=on_delivery(i),
                      timestamp=r.ts, **kw)
        left = p.flush(20)
        assert left == 0, f"{left} records still queued after 20 s"
        return [reports.get(i) for i in range(len(recs))]

    @staticmethod
    def consumer(b, **kw):
        from confluent_kafka import Consumer
        return Consumer(ck_conf(b, **{"group.id": "lab-ck-reader", "enable.auto.commit": False,
                                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200,
                                      "enable.partition.eof": False, **kw}))

    @staticmethod
    def consume(c, n, timeout: float = WAIT_S, settle: float = 0.3):
        """Up to n messages (then one short settle to catch extras); an error message is kept as an error dict."""
        out = []
        end = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < end:
            out.extend(c.consume(num_messages=n - len(out), timeout=0.3))
        if len(out) >= n:
            out.extend(c.consume(num_messages=100, timeout=settle))
        return out

    def read_partitions(self, b, topic, partitions):
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        c = self.consumer(b)
        try:
            marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                     for p in partitions}
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            got = {p: [] for p in partitions}
            for m in self.consume(c, sum(hi - lo for lo, hi in marks.values())):
                if m.error() is not None:
                    got.setdefault("errors", []).append(ck_error(m.error()))
                    continue
                ts_type, ts = m.timestamp()
                got[m.partition()].append({"offset": m.offset(), "key": m.key(), "value": m.value(),
                                           "headers": [tuple(h) for h in (m.headers() or [])], "timestamp": ts,
                                           "timestamp_type": ts_type - 1,  # librdkafka: 1 create, 2 log append
                                           "leader_epoch": m.leader_epoch()})
            return got, {p: tuple(v) for p, v in marks.items()}
        finally:
            c.close()

    def produce_read(self, b, topic, lat):
        created = self.create(b, (topic, 3, 1, None), (lat, 1, 1, {"message.timestamp.type": "LogAppendTime"}))
        recs = keyed_records("ck")
        delivered = self.send_all(b, topic, recs)
        before = now_ms()
        lat_reports = self.send_all(b, lat, recs[:3])
        after = now_ms()
        records, marks = self.read_partitions(b, topic, [0, 1, 2])
        lat_records, _ = self.read_partitions(b, lat, [0])
        return {"created": created, "delivered": delivered, "records": records, "watermarks": marks,
                "lat_delivered": [(err, part, off, ts[0], before <= ts[1] <= after)
                                  for err, part, off, ts in lat_reports],
                "lat_records": lat_view(lat_records[0], before, after)}, recs

    def list_offsets(self, b, topic):
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec
        self.create(b, (topic, 2, 1, None))
        recs = offsets_records()
        self.send_all(b, topic, recs[:5], partition=0)
        self.send_all(b, topic, recs[5:], partition=0)
        c = self.consumer(b)
        try:
            def at(p, ts):
                [tp] = c.offsets_for_times([TopicPartition(topic, p, ts)], timeout=10)
                return tp.offset if tp.error is None else ck_error(tp.error)
            ans = {"watermarks": {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                                  for p in (0, 1)},
                   "by_time": {k: at(0, ts) for k, ts in TS_QUERIES.items()},
                   "by_time_empty_partition": at(1, T0)}
            c.assign([TopicPartition(topic, 0, at(0, TS_QUERIES["between"]))])
            ans["consumed_from_time"] = [m.offset() if m.error() is None else ck_error(m.error())
                                         for m in self.consume(c, 6)]
        finally:
            c.close()
        a = self.admin(b)
        specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
                 "max_timestamp": OffsetSpec.max_timestamp(),
                 **{k: OffsetSpec.for_timestamp(ts) for k, ts in TS_QUERIES.items()}}
        ans["admin"] = {}
        for k, spec in specs.items():
            for p in (0, 1):
                tp = TopicPartition(topic, p)
                ans["admin"][f"{k}-p{p}"] = ck_result(a.list_offsets({tp: spec}, request_timeout=10)[tp])
        return ans, recs

    def groups(self, b, topic, group):
        from confluent_kafka import TopicPartition
        self.create(b, (topic, 2, 1, None))
        recs = timed_records(8)
        for p in (0, 1):
            self.send_all(b, topic, recs[p * 3:p * 3 + 3], partition=p)
        gt = {"session.timeout.ms": GROUP_TIMEOUTS_MS["session"],
              "heartbeat.interval.ms": GROUP_TIMEOUTS_MS["heartbeat"],
              "max.poll.interval.ms": GROUP_TIMEOUTS_MS["max_poll"]}
        a = self.admin(b)
        ans = {}
        c = self.consumer(b, **{"group.id": group, "client.id": "lab-ck-member", **gt})
        try:
            c.subscribe([topic])
            ans["consumed"] = sorted(msg_key(m) for m in self.consume(c, 6))
            ans["commit"] = sorted((tp.partition, tp.offset, None if tp.error is None else tp.error.name())
                                   for tp in c.commit(asynchronous=False))
            ans["running"] = ck_group_view(a, group)
            ans["delete_non_empty"] = ck_delete_group(a, group)
        finally:
            c.close()
        ans["after_close"] = ck_group_view(a, group)
        ans["committed"] = ck_group_offsets(a, group)
        for p in (0, 1):
            self.send_all(b, topic, [recs[6 + p]], partition=p)
        c = self.consumer(b, **{"group.id": group, "client.id": "lab-ck-member2", **gt})
        try:
            c.subscribe([topic])
            ans["resumed"] = sorted(msg_key(m) for m in self.consume(c, 2))
            c.commit(asynchronous=False)
            ans["committed_by_resumer"] = sorted((tp.partition, tp.offset) for tp in c.committed(
                [TopicPartition(topic, p) for p in (0, 1)], timeout=10))
        finally:
            c.close()
        ans["delete"] = ck_delete_group(a, group)
        ans["delete_again"] = ck_delete_group(a, group)
        ans["delete_unknown"] = ck_delete_group(a, group + "-never-used")
        ans["after_delete"] = ck_group_view(a, group)
        return ans, recs

    def admin_ops(self, b, topic):
        from confluent_kafka import TopicCollection, TopicPartition
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            NewPartitions,
            ResourceType,
        )
        self.create(b, (topic, 1, 1, {"retention.ms": "86400000"}))
        self.send_all(b, topic, timed_records(), partition=0)
        a = self.admin(b)
        res = ConfigResource(ResourceType.TOPIC, topic)

        def describe():
            try:
                got = a.describe_configs([res], request_timeout=10)[res].result(timeout=20)
            except Exception as e:  # noqa: BLE001
                return ck_error(e)
            return {k: ck_config_entry(v) for k, v in got.items() if k in CONFIG_KEYS}

        ans = {"configs_created": describe()}
        inc = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
        ans["incremental_alter"] = ck_result(a.incremental_alter_configs([inc], request_timeout=10)[inc])
        ans["configs_incremental"] = changed(describe, ans["configs_created"])
        # the legacy AlterConfigs replaces the whole set: every key not given goes back to its default
        legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "3600000"})
        ans["legacy_alter"] = ck_result(a.alter_configs([legacy], request_timeout=10)[legacy])
        ans["configs_legacy"] = changed(describe, ans["configs_incremental"])
        for key, count in (("create_partitions", 3), ("shrink_partitions", 2), ("same_partitions", 3)):
            ans[key] = ck_result(a.create_partitions([NewPartitions(topic, count)], request_timeout=10,
                                                     operation_timeout=10)[topic])
        tp = TopicPartition(topic, 0, 4)
        ans["delete_records"] = ck_result(a.delete_records([tp], request_timeout=10, operation_timeout=10)[tp])
        ans["cluster"] = ck_result(a.describe_cluster(request_timeout=10))
        ans["topics"] = ck_result(a.describe_topics(TopicCollection([topic]), request_timeout=10)[topic])
        if "topic_id" in ans["topics"]:
            ans["topics"]["topic_id"] = topic_id_shown(ans["topics"]["topic_id"])
        ans["metadata"] = ck_metadata(a.list_topics(topic, timeout=10), topic)
        c = self.consumer(b)
        try:
            ans["watermarks"] = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                                 for p in range(3)}
        finally:
            c.close()
        return ans

    def errors(self, b, topic, names):
        from confluent_kafka import TopicPartition
        ans = {"creates": self.create(b, (topic, 1, 1, None), (topic, 1, 1, None), (names["rf3"], 1, 3, None),
                                      ("bad name!", 1, 1, None), (names["zero"], 0, 1, None))}
        self.send_all(b, topic, timed_records(3), partition=0)
        try:
            ans["produce_partition_5"] = self.send_all(b, topic, [Rec(b"k", b"x", (), T0)], partition=5)
        except Exception as e:  # noqa: BLE001 — the client's reaction is the answer
            ans["produce_partition_5"] = ck_error(e)
        ans["fetch_out_of_range"] = {}
        for reset in ("error", "earliest", "latest"):
            c = self.consumer(b, **{"auto.offset.reset": reset})
            try:
                c.assign([TopicPartition(topic, 0, 100)])
                got = [m.offset() if m.error() is None else ck_error(m.error()) for m in self.consume(c, 3, 1.5)]
                ans["fetch_out_of_range"][reset] = {"records": got, "position": [
                    tp.offset for tp in c.position([TopicPartition(topic, 0)])]}
            finally:
                c.close()
        return ans


def msg_key(m):
    return (m.partition(), m.offset()) if m.error() is None else (-1, ck_error(m.error())["error"])


def ck_config_entry(e):
    from confluent_kafka.admin import ConfigSource
    return {"value": e.value, "source": ConfigSource(e.source).name, "is_read_only": e.is_read_only,
            "is_default": e.is_default, "is_sensitive": e.is_sensitive,
            "synonyms": [(s.name, s.value, ConfigSource(s.source).name) for s in e.synonyms.values()]}


def ck_metadata(md, topic):
    t = md.topics[topic]
    return {"brokers": sorted((bk.id, bk.host) for bk in md.brokers.values()), "controller_id": md.controller_id,
            "topic_error": None if t.error is None else t.error.name(),
            "partitions": {p.id: {"leader": p.leader, "replicas": p.replicas, "isrs": p.isrs,
                                  "error": None if p.error is None else p.error.name()}
                           for p in t.partitions.values()}}


def ck_group_view(a, group):
    listed = ck_result(a.list_consumer_groups(request_timeout=10))
    if isinstance(listed, dict) and "valid" in listed:
        listed = [g for g in listed["valid"] if g["group_id"] == group]
    described = ck_result(a.describe_consumer_groups([group], request_timeout=10)[group])
    return {"listed": listed, "described": described}


def ck_group_offsets(a, group):
    from confluent_kafka import ConsumerGroupTopicPartitions
    return ck_result(a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)[group])


def ck_delete_group(a, group):
    return ck_result(a.delete_consumer_groups([group], request_timeout=10)[group])


# -- aiokafka -----------------------------------------------------------------------------------------------------

def aio_run(coro_fn, timeout: float = 60):
    """One asyncio.run per workload, bounded: a hang fails the workload instead of the whole suite."""
    async def bounded():
        return await asyncio.wait_for(coro_fn(), timeout)
    return asyncio.run(bounded())


class AioKafka:
    name = "aiokafka"

    @staticmethod
    def admin(b):
        from aiokafka.admin import AIOKafkaAdminClient
        return AIOKafkaAdminClient(bootstrap_servers=b, request_timeout_ms=10000, client_id="lab-aio-admin")

    @staticmethod
    def consumer(b, *topics, **kw):
        from aiokafka import AIOKafkaConsumer
        kw.setdefault("enable_auto_commit", False)
        kw.setdefault("auto_offset_reset", "earliest")
        return AIOKafkaConsumer(*topics, bootstrap_servers=b, request_timeout_ms=11000, fetch_max_wait_ms=200, **kw)

    @staticmethod
    async def stop(c):
        await asyncio.sleep(0)  # aiokafka: stop() right after start() re-raises the cancel of a task that never ran
        await c.stop()

    async def create(self, b, *topics):
        """topics: (name, partitions, replication, configs) -> [{topic, error, error_message}]."""
        from aiokafka.admin import NewTopic
        a = self.admin(b)
        await a.start()
        try:
            out = []
            for name, parts, rf, configs in topics:
                try:
                    resp = await a.create_topics([NewTopic(name, parts, rf, topic_configs=configs or {})],
                                                 timeout_ms=10000)
                    out += [{"topic": t[0], "error": t[1], "error_message": t[2] if len(t) > 2 else None}
                            for t in resp.topic_errors]
                except Exception as e:  # noqa: BLE001 — aiokafka raises some create errors itself
                    out.append({"topic": name, "error": error_name(e), "error_message": str(e)})
            return out
        finally:
            await a.close()

    @staticmethod
    async def send_all(b, topic, recs, partition=None):
        from aiokafka import AIOKafkaProducer
        p = AIOKafkaProducer(bootstrap_servers=b, request_timeout_ms=10000, linger_ms=5)
        await p.start()
        try:
            futs = [await p.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=partition,
                                 timestamp_ms=r.ts) for r in recs]
            return await asyncio.gather(*futs)
        finally:
            await p.stop()

    @staticmethod
    async def get_n(c, n, timeout: float = WAIT_S, settle_ms: int = 300):
        out = []
        end = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < end:
            for recs in (await c.getmany(timeout_ms=300, max_records=n - len(out))).values():
                out.extend(recs)
        if len(out) >= n:
            for recs in (await c.getmany(timeout_ms=settle_ms)).values():
                out.extend(recs)
        return out

    async def read_partitions(self, b, topic, partitions):
        from aiokafka import TopicPartition
        c = self.consumer(b)
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            low, high = await c.beginning_offsets(tps), await c.end_offsets(tps)
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            got = {p: [] for p in partitions}
            for r in await self.get_n(c, sum(high[tp] - low[tp] for tp in tps)):
                got[r.partition].append({"offset": r.offset, "key": r.key, "value": r.value,
                                         "headers": [tuple(h) for h in r.headers], "timestamp": r.timestamp,
                                         "timestamp_type": r.timestamp_type})
            return got, {tp.partition: (low[tp], high[tp]) for tp in tps}
        finally:
            await self.stop(c)

    def produce_read(self, b, topic, lat):
        async def go():
            created = await self.create(b, (topic, 3, 1, None),
                                        (lat, 1, 1, {"message.timestamp.type": "LogAppendTime"}))
            recs = keyed_records("aio")
            meta = await self.send_all(b, topic, recs)
            # (partition, offset, type, log start) only: aiokafka reports the first record's timestamp for every
            # record of a batch, and how records fall into batches is the client's timing
            delivered = [(m.partition, m.offset, m.timestamp_type, m.log_start_offset) for m in meta]
            before = now_ms()
            lat_meta = await self.send_all(b, lat, recs[:3])
            after = now_ms()
            records, marks = await self.read_partitions(b, topic, [0, 1, 2])
            lat_records, _ = await self.read_partitions(b, lat, [0])
            return {"created": created, "delivered": delivered, "records": records, "watermarks": marks,
                    "lat_delivered": [(m.partition, m.offset, m.timestamp_type, before <= m.timestamp <= after)
                                      for m in lat_meta],
                    "lat_records": lat_view(lat_records[0], before, after)}, recs
        return aio_run(go)

    def list_offsets(self, b, topic):
        from aiokafka import TopicPartition

        async def go():
            await self.create(b, (topic, 2, 1, None))
            recs = offsets_records()
            await self.send_all(b, topic, recs[:5], partition=0)
            await self.send_all(b, topic, recs[5:], partition=0)
            tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
            c = self.consumer(b)
            await c.start()
            try:
                async def at(tp, ts):
                    found = (await c.offsets_for_times({tp: ts}))[tp]
                    return None if found is None else (found.offset, found.timestamp)
                low, high = await c.beginning_offsets([tp0, tp1]), await c.end_offsets([tp0, tp1])
                ans = {"earliest": {tp.partition: o for tp, o in low.items()},
                       "latest": {tp.partition: o for tp, o in high.items()},
                       "by_time": {k: await at(tp0, ts) for k, ts in TS_QUERIES.items()},
                       "by_time_empty_partition": await at(tp1, T0)}
                c.assign([tp0])
                c.seek(tp0, (await at(tp0, TS_QUERIES["between"]))[0])
                ans["consumed_from_time"] = [r.offset for r in await self.get_n(c, 6)]
            finally:
                await self.stop(c)
            return ans, recs
        return aio_run(go)

    def groups(self, b, topic, group):
        from aiokafka import TopicPartition

        async def go():
            await self.create(b, (topic, 2, 1, None))
            recs = timed_records(8)
            for p in (0, 1):
                await self.send_all(b, topic, recs[p * 3:p * 3 + 3], partition=p)
            gt = dict(session_timeout_ms=GROUP_TIMEOUTS_MS["session"],
                      heartbeat_interval_ms=GROUP_TIMEOUTS_MS["heartbeat"],
                      max_poll_interval_ms=GROUP_TIMEOUTS_MS["max_poll"], rebalance_timeout_ms=10000)
            ck = ConfluentKafka.admin(b)  # aiokafka has no DeleteGroups
            a = self.admin(b)
            await a.start()
            ans = {}
            try:
                c = self.consumer(b, topic, group_id=group, client_id="lab-aio-member", **gt)
                await c.start()
                try:
                    ans["consumed"] = sorted((r.partition, r.offset) for r in await self.get_n(c, 6))
                    await c.commit()
                    ans["running"] = await self.group_view(a, group)
                    ans["delete_non_empty"] = ck_delete_group(ck, group)
                finally:
                    await self.stop(c)
                ans["after_close"] = await self.group_view(a, group)
                ans["committed"] = await self.offsets_of(a, group)
                for p in (0, 1):
                    await self.send_all(b, topic, [recs[6 + p]], partition=p)
                c = self.consumer(b, topic, group_id=group, client_id="lab-aio-member2", **gt)
                await c.start()
                try:
                    ans["resumed"] = sorted((r.partition, r.offset) for r in await self.get_n(c, 2))
                    await c.commit()
                    ans["committed_by_resumer"] = {p: await c.committed(TopicPartition(topic, p)) for p in (0, 1)}
                finally:
                    await self.stop(c)
                ans["delete"] = ck_delete_group(ck, group)
                ans["delete_again"] = ck_delete_group(ck, group)
                ans["delete_unknown"] = ck_delete_group(ck, group + "-never-used")
                ans["listed_after_delete"] = [g for g in await a.list_consumer_groups() if g[0] == group]
            finally:
                await a.close()
            return ans, recs
        return aio_run(go)

    @staticmethod
    async def group_view(a, group):
        listed = sorted(plain(g) for g in await a.list_consumer_groups() if g[0] == group)
        described = [r.to_object() for r in await a.describe_consumer_groups([group])]
        return {"listed": listed, "described": plain(described)}

    @staticmethod
    async def offsets_of(a, group):
        got = await a.list_consumer_group_offsets(group)
        return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in sorted(got.items())}

    def admin_ops(self, b, topic):
        from aiokafka import TopicPartition
        from aiokafka.admin import NewPartitions, RecordsToDelete
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        async def go():
            await self.create(b, (topic, 1, 1, {"retention.ms": "86400000"}))
            await self.send_all(b, topic, timed_records(), partition=0)
            a = self.admin(b)
            await a.start()
            ans = {}
            try:
                async def describe():
                    [resp] = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                                      include_synonyms=True)
                    out = {}
                    for res in resp.to_object()["resources"]:
                        out["error"] = {"code": res["error_code"], "message": res["error_message"]}
                        for e in res["config_entries"]:
                            if e["config_names"] in CONFIG_KEYS:
                                out[e["config_names"]] = e
                    return plain(out)
                ans["configs_created"] = await describe()
                # the legacy AlterConfigs replaces the whole set: every key not given goes back to its default
                res = ConfigResource(ConfigResourceType.TOPIC, topic,
                                     configs={"max.message.bytes": "2000000", "cleanup.policy": "compact"})
                ans["legacy_alter"] = [r.to_object() for r in await a.alter_configs([res])]
                ans["configs_legacy"] = await changed_async(describe, ans["configs_created"])
                res = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3600000"})
                ans["legacy_alter_again"] = [r.to_object() for r in await a.alter_configs([res])]
                ans["configs_legacy_again"] = await changed_async(describe, ans["configs_legacy"])
                for key, count in (("create_partitions", 3), ("shrink_partitions", 2)):
                    try:
                        resp = await a.create_partitions({topic: NewPartitions(count)}, timeout_ms=10000)
                        ans[key] = resp.to_object()
                    except Exception as e:  # noqa: BLE001
                        ans[key] = {"error": error_name(e), "error_message": str(e)}
                tp = TopicPartition(topic, 0)
                ans["delete_records"] = plain(await a.delete_records({tp: RecordsToDelete(4)}, timeout_ms=10000))
                ans["cluster"] = plain(await a.describe_cluster())
                ans["topics"] = plain(await a.describe_topics([topic]))
            finally:
                await a.close()
            c = self.consumer(b)
            await c.start()
            try:
                tps = [TopicPartition(topic, p) for p in range(3)]
                low, high = await c.beginning_offsets(tps), await c.end_offsets(tps)
                ans["watermarks"] = {tp.partition: (low[tp], high[tp]) for tp in tps}
            finally:
                await self.stop(c)
            return ans
        return aio_run(go)

    def errors(self, b, topic, names):
        from aiokafka import TopicPartition

        async def go():
            ans = {"creates": await self.create(b, (topic, 1, 1, None), (topic, 1, 1, None),
                                                (names["rf3"], 1, 3, None), ("bad name!", 1, 1, None),
                                                (names["zero"], 0, 1, None))}
            await self.send_all(b, topic, timed_records(3), partition=0)
            try:
                meta = await self.send_all(b, topic, [Rec(b"k", b"x", (), T0)], partition=5)
                ans["produce_partition_5"] = ("ok", plain(meta))
            except Exception as e:  # noqa: BLE001 — the client's reaction is the answer
                ans["produce_partition_5"] = (error_name(e), str(e))
            ans["fetch_out_of_range"] = {}
            for reset in ("none", "earliest", "latest"):
                c = self.consumer(b, auto_offset_reset=reset)
                await c.start()
                tp = TopicPartition(topic, 0)
                try:
                    c.assign([tp])
                    c.seek(tp, 100)
                    try:
                        got = [r.offset for r in await self.get_n(c, 3, timeout=1.5)]
                        ans["fetch_out_of_range"][reset] = {"records": got, "position": await c.position(tp)}
                    except Exception as e:  # noqa: BLE001
                        ans["fetch_out_of_range"][reset] = {"error": error_name(e)}
                finally:
                    await self.stop(c)
            return ans
        return aio_run(go)


# -- kcat (librdkafka 2.0.2) ----------------------------------------------------------------------------------------

KCAT_GROUP_OPTS = ["-X", f"session.timeout.ms={GROUP_TIMEOUTS_MS['session']}",
                   "-X", f"heartbeat.interval.ms={GROUP_TIMEOUTS_MS['heartbeat']}",
                   "-X", f"max.poll.interval.ms={GROUP_TIMEOUTS_MS['max_poll']}", "-X", "auto.offset.reset=earliest"]
KCAT_LOG_LINE = re.compile(r"^%\d\|[\d.]+\|(\w+)\|[^|]*\| \[thrd:[^\]]*\]: (.*)$")


def kcat_messages(stderr: str) -> list[str]:
    """kcat's and librdkafka's messages on stderr without their timestamps and instance names."""
    out = []
    for line in stderr.splitlines():
        m = KCAT_LOG_LINE.match(line)
        if m:
            out.append(f"{m.group(1)}: {m.group(2)}")
        elif line.startswith("% "):
            out.append(line)
    return out


def text_of(out) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def kcat_json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip().startswith("{")]


class Kcat:
    name = "kcat"
    path = "kcat"  # set by the client_impl fixture (a missing kcat fails the test, never skips it)

    def run(self, b, *args, input: str | None = None, timeout: float = 30):
        """kcat against ``b``: (exit status, stdout, stderr); a run past ``timeout`` is killed and answers None."""
        cmd = [self.path, "-b", b, "-m", "10", "-X", "broker.address.family=v4", *args]
        try:
            r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:  # its output so far may come as bytes, whatever text= said
            return None, text_of(e.stdout), text_of(e.stderr)
        return r.returncode, r.stdout, r.stderr

    def ok(self, b, *args, **kw):
        rc, out, err = self.run(b, *args, **kw)
        assert rc == 0, f"kcat {' '.join(args)} on {b} -> {rc}\n{out[-2000:]}\n{err[-2000:]}"
        return out

    def produce(self, b, topic, recs, *extra):
        """Lines "key:value" (-K :), null values with -Z; kcat stamps the records itself. Returns the window."""
        lines = "".join(f"{r.key.decode()}:{'' if r.value is None else r.value.decode()}\n" for r in recs)
        before = now_ms()
        self.ok(b, "-P", "-t", topic, "-K", ":", "-Z", *extra, input=lines)
        return before, now_ms()

    def consume(self, b, topic, *extra):
        return kcat_json_lines(self.ok(b, "-C", "-t", topic, "-e", "-J", *extra))

    def query(self, b, topic, partition, ts):
        rc, out, err = self.run(b, "-Q", "-t", f"{topic}:{partition}:{ts}", "-J")
        if rc != 0:
            return {"exit": rc, "stderr": kcat_messages(err)}
        return json.loads(out)[topic][str(partition)].get("offset")

    @staticmethod
    def record(m, before, after):
        ts = m["ts"]
        return {"offset": m["offset"], "key": None if m["key"] is None else m["key"].encode(),
                "value": None if m["payload"] is None else m["payload"].encode(),
                "headers": [(k, v.encode()) for k, v in zip(m.get("headers", [])[::2], m.get("headers", [])[1::2])],
                "timestamp": "in produce window" if before <= ts <= after else ts,
                "timestamp_type": {"create": 0, "logappend": 1}.get(m["tstype"], m["tstype"])}

    def metadata(self, b, topic):
        md = json.loads(self.ok(b, "-L", "-t", topic, "-J"))
        return {"brokers": [(bk["id"], bk["name"].rsplit(":", 1)[0]) for bk in md["brokers"]],
                "controllerid": md["controllerid"], "topics": md["topics"]}

    def produce_read(self, b, topic, lat):
        created = ConfluentKafka().create(b, (topic, 3, 1, None),
                                          (lat, 1, 1, {"message.timestamp.type": "LogAppendTime"}))
        # kcat gives every record of a run the same headers and stamps them itself (CreateTime = its clock)
        recs = [Rec(r.key, r.value, (("tag", b"kcat"), ("run", b"1")), "in produce window")
                for r in keyed_records("kcat")]
        before, after = self.produce(b, topic, recs, "-H", "tag=kcat", "-H", "run=1")
        got = self.consume(b, topic, "-o", "beginning")
        records = {p: sorted((self.record(m, before, after) for m in got if m["partition"] == p),
                             key=lambda r: r["offset"]) for p in range(3)}
        marks = {p: (self.query(b, topic, p, -2), self.query(b, topic, p, -1)) for p in range(3)}
        lat_before, lat_after = self.produce(b, lat, recs[:3])
        lat_records = [self.record(m, lat_before, lat_after) for m in self.consume(b, lat, "-o", "beginning")]
        return {"created": created, "records": records, "watermarks": marks,
                "lat_records": [{"offset": r["offset"], "key": r["key"], "timestamp_type": r["timestamp_type"],
                                 "in_window": r["timestamp"] == "in produce window"} for r in lat_records]}, recs

    def list_offsets(self, b, topic):
        ck = ConfluentKafka()
        ck.create(b, (topic, 2, 1, None))
        recs = offsets_records()  # kcat cannot set timestamps: confluent-kafka writes records with known ones
        ck.send_all(b, topic, recs[:5], partition=0)
        ck.send_all(b, topic, recs[5:], partition=0)
        ans = {"earliest": {p: self.query(b, topic, p, -2) for p in (0, 1)},
               "latest": {p: self.query(b, topic, p, -1) for p in (0, 1)},
               "by_time": {k: self.query(b, topic, 0, ts) for k, ts in TS_QUERIES.items()},
               "by_time_empty_partition": self.query(b, topic, 1, T0),
               "consumed_from_time": [m["offset"] for m in self.consume(b, topic, "-p", "0", "-o",
                                                                        f"s@{TS_QUERIES['between']}")],
               "consumed_time_range": [m["offset"] for m in self.consume(
                   b, topic, "-p", "0", "-o", f"s@{TS_QUERIES['first'] + 2000}", "-o", f"e@{T0 + 6000}")]}
        return ans, recs

    def groups(self, b, topic, group):
        ck = ConfluentKafka()
        ck.create(b, (topic, 2, 1, None))
        recs = timed_records(8)
        for p in (0, 1):
            ck.send_all(b, topic, recs[p * 3:p * 3 + 3], partition=p)
        a = ck.admin(b)
        ans = {}
        member = KcatMember(self.path, b, group, topic, "lab-kcat-member")
        try:
            member.wait_records(6)
            ans["consumed"] = sorted((m["partition"], m["offset"]) for m in member.records)
            ans["running"] = ck_group_view(a, group)
            ans["delete_non_empty"] = ck_delete_group(a, group)
        finally:
            ans["exit"] = member.stop()  # SIGTERM: kcat closes the consumer (commit of its position, LeaveGroup)
        ans["after_close"] = ck_group_view(a, group)
        ans["committed"] = ck_group_offsets(a, group)
        for p in (0, 1):
            ck.send_all(b, topic, [recs[6 + p]], partition=p)
        rc, out, err = self.run(b, "-G", group, "-e", "-J", "-X", "client.id=lab-kcat-member2", *KCAT_GROUP_OPTS,
                                topic, timeout=40)
        ans["resumed"] = {"exit": rc, "records": sorted((m["partition"], m["offset"]) for m in kcat_json_lines(out))}
        ans["committed_by_resumer"] = ck_group_offsets(a, group)
        ans["delete"] = ck_delete_group(a, group)
        ans["delete_again"] = ck_delete_group(a, group)
        ans["delete_unknown"] = ck_delete_group(a, group + "-never-used")
        ans["after_delete"] = ck_group_view(a, group)
        return ans, recs

    def admin_ops(self, b, topic):
        """kcat has no admin requests: confluent-kafka's AdminClient changes the topic, kcat shows the result."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import NewPartitions
        ck = ConfluentKafka()
        ck.create(b, (topic, 1, 1, {"retention.ms": "86400000"}))
        ck.send_all(b, topic, timed_records(), partition=0)
        a = ck.admin(b)
        ans = {"metadata_created": self.metadata(b, topic)}
        ans["create_partitions"] = ck_result(a.create_partitions([NewPartitions(topic, 3)], request_timeout=10,
                                                                 operation_timeout=10)[topic])
        ans["metadata_grown"] = self.metadata(b, topic)
        tp = TopicPartition(topic, 0, 4)
        ans["delete_records"] = ck_result(a.delete_records([tp], request_timeout=10, operation_timeout=10)[tp])
        ans["watermarks"] = {p: (self.query(b, topic, p, -2), self.query(b, topic, p, -1)) for p in range(3)}
        ans["consumed_after_delete"] = [(m["partition"], m["offset"]) for m in self.consume(b, topic, "-o",
                                                                                             "beginning")]
        # below the log start: librdkafka gets OFFSET_OUT_OF_RANGE and resets to the start (auto.offset.reset)
        ans["consumed_below_start"] = [m["offset"] for m in self.consume(
            b, topic, "-p", "0", "-o", "2", "-X", "auto.offset.reset=earliest")]
        return ans

    def errors(self, b, topic, names):
        ans = {"creates": ConfluentKafka().create(b, (topic, 1, 1, None))}
        self.produce(b, topic, timed_records(3), "-p", "0")
        rc, out, err = self.run(b, "-P", "-t", topic, "-K", ":", "-p", "5", input="k:x\n")
        ans["produce_partition_5"] = {"exit": rc, "stderr": kcat_messages(err)}
        ans["fetch_out_of_range"] = {}
        for reset in ("error", "earliest", "latest"):
            rc, out, err = self.run(b, "-C", "-t", topic, "-p", "0", "-o", "100", "-e", "-J",
                                    "-X", f"auto.offset.reset={reset}", timeout=20)
            ans["fetch_out_of_range"][reset] = {"exit": rc, "records": [m["offset"] for m in kcat_json_lines(out)],
                                                "stderr": kcat_messages(err)}
        return ans


class KcatMember:
    """A running `kcat -G` member; a thread collects its JSON records (stdout), another its stderr."""

    def __init__(self, path, b, group, topic, client_id):
        self.proc = children.popen(
            [path, "-b", b, "-X", "broker.address.family=v4", "-G", group, "-u", "-J", "-X", f"client.id={client_id}",
             *KCAT_GROUP_OPTS, topic],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records, self.stderr = [], []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True)]
        for t in self.threads:
            t.start()

    def _read(self, stream, is_out):
        for line in stream:
            with self.lock:
                if is_out and line.strip():
                    self.records.append(json.loads(line))
                elif not is_out:
                    self.stderr.append(line)

    def wait_records(self, n, timeout: float = WAIT_S):
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            with self.lock:
                if len(self.records) >= n:
                    break
            time.sleep(0.05)
        time.sleep(0.3)  # a record too many would show up now

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(5)
        for t in self.threads:
            t.join(5)
        return rc


# -- the tests ------------------------------------------------------------------------------------------------------

IMPLS = {"kafka-python": KafkaPython(), "confluent-kafka": ConfluentKafka(), "aiokafka": AioKafka(), "kcat": Kcat()}

# Fields where the two brokers differ by nature, never by a fault of kafkalog's:
SAME_BY_NATURE = (
    "*.port",            # each broker listens on a port of its own
    "*cluster_id",       # Kafka's is random per format (the lab formats a new one); kafkalog's is fixed
    "*member_id",        # "<client.id>-<random UUID>", made by each coordinator
    "*error_message",    # free text, each broker's own words; the error codes are compared
)
# Fields of protocol versions kafkalog does not advertise (README's API table), whose values carry nothing on one
# node: the client shows Kafka's value from the newer version and "none" for kafkalog's older one.
LEADER_EPOCHS = ("admin.*.leader_epoch",  # ListOffsets v4+ (kafkalog: 1-3); Kafka's is always 0 on one node
                 "committed*.leader_epoch")  # OffsetCommit v6+/OffsetFetch v5+ (kafkalog: 2-3 / 1-3)
METADATA_V5_PLUS = ("topics*.offline_replicas",  # Metadata v5+ (kafkalog: 0-4); always [] on one node
                    "topics*.partitions*.leader_epoch",  # Metadata v7+; always 0 on one node
                    "topics*.authorized_operations",  # Metadata v8+, asked by kafka-python
                    "cluster.brokers*.is_fenced")  # DescribeCluster v2+ (kafkalog: 0-1); never fenced here


@pytest.fixture
def client_impl(client):
    """The client's workloads (kcat: with the path of the installed kcat)."""
    impl = IMPLS[client]
    if client == "kcat":
        path = shutil.which("kcat") or shutil.which("kafkacat")
        if path is None:
            pytest.fail("kcat is not installed (Debian: apt-get install kcat; .ci/run installs it)", pytrace=False)
        impl.path = path
    return impl


def run_both(targets, fn):
    """fn(bootstrap) on Kafka, then on kafkalog: {"kafka": answer, "kafkalog": answer} with the time each took."""
    out, took = {}, {}
    for name, t in targets.items():
        t0 = time.monotonic()
        out[name] = fn(t.bootstrap)
        took[name] = round(time.monotonic() - t0, 2)
    print(f"workload seconds: {took}")
    return out


def by_repr(items):
    return sorted(items, key=repr)


@pytest.mark.parametrize("client", CLIENTS)
def test_produce_keyed_records_and_read_back(client, client_impl, targets, topic_name, compare):
    topic, lat = topic_name("t"), topic_name("lat")
    answers = run_both(targets, lambda b: client_impl.produce_read(b, topic, lat))
    (kafka, sent), (klog, _) = answers["kafka"], answers["kafkalog"]
    # Kafka's own answer is what the workload means: every record read back as sent, offsets dense per partition
    got = [(r["key"], r["value"], tuple(r["headers"]), r["timestamp"]) for recs in kafka["records"].values()
           for r in recs]
    assert by_repr(got) == by_repr((r.key, r.value, r.headers, r.ts) for r in sent), f"Kafka read back {got}"
    for p, recs in kafka["records"].items():
        assert [r["offset"] for r in recs] == list(range(len(recs))) and kafka["watermarks"][p] == (0, len(recs)), \
            f"Kafka: partition {p} {recs} watermarks {kafka['watermarks'][p]}"
    assert [(r["timestamp_type"], r["in_window"]) for r in kafka["lat_records"]] == [(1, True)] * 3, kafka
    compare(kafka, klog, ignore=SAME_BY_NATURE, what=f"{client}: produce keyed records, read them back")


@pytest.mark.parametrize("client", CLIENTS)
def test_list_offsets_earliest_latest_by_timestamp(client, client_impl, targets, topic_name, compare):
    topic = topic_name()
    answers = run_both(targets, lambda b: client_impl.list_offsets(b, topic))
    (kafka, sent), (klog, _) = answers["kafka"], answers["kafkalog"]
    first_at_or_after = next(i for i, r in enumerate(sent) if r.ts >= TS_QUERIES["between"])
    assert kafka["consumed_from_time"] == list(range(first_at_or_after, len(sent))), kafka
    compare(kafka, klog, ignore=SAME_BY_NATURE + LEADER_EPOCHS, what=f"{client}: list offsets")


@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_group_commit_describe_resume_delete(client, client_impl, targets, topic_name, compare):
    topic, group = topic_name("t"), topic_name("g")
    answers = run_both(targets, lambda b: client_impl.groups(b, topic, group))
    (kafka, _), (klog, _) = answers["kafka"], answers["kafkalog"]
    resumed = kafka["resumed"]["records"] if client == "kcat" else kafka["resumed"]
    assert len(kafka["consumed"]) == 6 and resumed == [(0, 3), (1, 3)], kafka
    assert "NON_EMPTY" in repr(kafka["delete_non_empty"]).upper().replace("NONEMPTY", "NON_EMPTY"), kafka
    assert "NOTFOUND" in repr(kafka["delete_again"]).upper().replace("_", ""), kafka
    assert "NOTFOUND" in repr(kafka["delete_unknown"]).upper().replace("_", ""), kafka
    compare(kafka, klog, ignore=SAME_BY_NATURE + LEADER_EPOCHS,
            what=f"{client}: consumer group")


@pytest.mark.parametrize("client", CLIENTS)
def test_admin_configs_partitions_records_cluster(client, client_impl, targets, topic_name, compare):
    topic = topic_name()
    answers = run_both(targets, lambda b: client_impl.admin_ops(b, topic))
    kafka, klog = answers["kafka"], answers["kafkalog"]
    assert tuple(kafka["watermarks"][0]) == (4, 10) and len(kafka["watermarks"]) == 3, kafka
    compare(kafka, klog, ignore=SAME_BY_NATURE + METADATA_V5_PLUS, what=f"{client}: admin")


@pytest.mark.parametrize("client", CLIENTS)
def test_errors_for_bad_input(client, client_impl, targets, topic_name, compare):
    topic = topic_name()
    names = {"rf3": topic_name("rf3"), "zero": topic_name("zero")}
    answers = run_both(targets, lambda b: client_impl.errors(b, topic, names))
    kafka, klog = answers["kafka"], answers["kafkalog"]
    assert [c["error"] in (None, 0) for c in kafka["creates"]] == [True] + [False] * (len(kafka["creates"]) - 1)
    assert kafka["fetch_out_of_range"]["earliest"]["records"] == [0, 1, 2], kafka
    compare(kafka, klog, ignore=SAME_BY_NATURE, what=f"{client}: errors for bad input")
