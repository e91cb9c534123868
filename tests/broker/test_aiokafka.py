"""aiokafka 0.14 against the broker over loopback: admin create/delete topics and DeleteRecords, produce with every
codec it has here (plain and idempotent), consume from the beginning and from a timestamp, groups with commits across
a broker restart, and a two-member rebalance, each test one asyncio.run. Record contents are compared exactly."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import codec as aio_codec
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.structs import OffsetAndMetadata

pytestmark = pytest.mark.usefixtures("deadline")

T0 = (int(time.time()) - 600) * 1000
GROUP_TIMEOUTS = dict(session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=10000,
                      rebalance_timeout_ms=10000)
CODECS = {"none": lambda: True, "gzip": aio_codec.has_gzip, "snappy": aio_codec.has_snappy,
          "lz4": aio_codec.has_lz4, "zstd": aio_codec.has_zstd}


def make_records(n: int, tag: str = "r", start: int = 0):
    return [(b"k%d" % i, (b"%s-%05d:" % (tag.encode(), i)) + b"x" * (i % 7 * 10),
             [("h", b"%d" % i), ("tag", tag.encode())], T0 + i * 1000)
            for i in range(start, start + n)]


def as_tuples(records):
    out = []
    for r in records:
        assert r.timestamp_type == 0  # CreateTime
        out.append((r.offset, r.key, r.value, [tuple(h) for h in r.headers], r.timestamp))
    return out


def expected(records, first_offset: int = 0):
    return [(first_offset + i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)]


def run(coro, timeout: float = 60):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


class Admin:
    def __init__(self, broker):
        self.admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10000)

    async def __aenter__(self):
        await self.admin.start()
        return self.admin

    async def __aexit__(self, *exc):
        await self.admin.close()


async def create_topic(broker, name: str, partitions: int = 1):
    async with Admin(broker) as a:
        resp = await a.create_topics([NewTopic(name, partitions, 1)], timeout_ms=10000)
    return [(t[0], t[1]) for t in resp.topic_errors]


async def produce(broker, topic: str, records, partition: int = 0, **kw):
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10000,
                         **{"linger_ms": 5, **kw})
    await p.start()
    try:
        futures = [await p.send(topic, value=v, key=k, headers=h, timestamp_ms=ts, partition=partition)
                   for k, v, h, ts in records]
        # (partition, offset) only: aiokafka reports the first record's timestamp for every record of a batch
        return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
    finally:
        await p.stop()


def consumer(broker, *topics, **kw):
    kw.setdefault("enable_auto_commit", False)
    kw.setdefault("auto_offset_reset", "earliest")
    return AIOKafkaConsumer(*topics, bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=11000,
                            fetch_max_wait_ms=200, **kw)


async def stop(c):
    await asyncio.sleep(0)  # aiokafka: stop() right after start() re-raises the cancel of a task that never ran
    await c.stop()


async def get_n(c, n: int, timeout: float = 15.0, settle_ms: int = 300):
    out = []
    end = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        for recs in (await c.getmany(timeout_ms=300, max_records=n - len(out))).values():
            out.extend(recs)
    if len(out) >= n:
        for recs in (await c.getmany(timeout_ms=settle_ms)).values():
            out.extend(recs)
    return out


async def read_all(broker, topic: str, n: int, partition: int = 0, offset: int | None = None):
    c = consumer(broker)
    await c.start()
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        if offset is None:
            await c.seek_to_beginning(tp)
        else:
            c.seek(tp, offset)
        return await get_n(c, n)
    finally:
        await stop(c)


def test_create_topic_metadata_and_duplicate(broker, topic_name):
    name = topic_name()

    async def go():
        assert await create_topic(broker, name, 3) == [(name, 0)]
        assert await create_topic(broker, name, 3) == [(name, 36)]  # TOPIC_ALREADY_EXISTS
        async with Admin(broker) as a:
            assert name in await a.list_topics()
            [described] = await a.describe_topics([name])
        assert (described["topic"], described["error_code"]) == (name, 0)
        assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2]
        c = consumer(broker)
        await c.start()
        try:
            assert name in await c.topics()
        finally:
            await stop(c)
    run(go())


@pytest.mark.parametrize("codec", list(CODECS))
def test_produce_and_consume_from_beginning(broker, topic_name, codec):
    if not CODECS[codec]():
        pytest.skip(f"aiokafka has no {codec} codec here")
    topic = topic_name()
    records = make_records(40, tag=codec)

    async def go():
        await create_topic(broker, topic)
        meta = await produce(broker, topic, records, compression_type=None if codec == "none" else codec)
        assert meta == [(0, i) for i in range(40)]
        assert as_tuples(await read_all(broker, topic, 40)) == expected(records)
    run(go())


def test_idempotent_producer(broker, topic_name):
    topic = topic_name()
    records = make_records(30, tag="idem")

    async def go():
        await create_topic(broker, topic)
        meta = await produce(broker, topic, records, enable_idempotence=True, acks="all")
        assert [m[1] for m in meta] == list(range(30))
        assert as_tuples(await read_all(broker, topic, 30)) == expected(records)
    run(go())


def test_offsets_for_times_and_consume_from_timestamp(broker, topic_name):
    topic = topic_name()
    records = make_records(20, tag="ts")
    tp = TopicPartition(topic, 0)

    async def go():
        await create_topic(broker, topic)
        await produce(broker, topic, records[:10])
        await produce(broker, topic, records[10:])
        c = consumer(broker)
        await c.start()
        try:
            async def lookup(ts):
                found = (await c.offsets_for_times({tp: ts}))[tp]
                return None if found is None else (found.offset, found.timestamp)
            assert await lookup(T0 + 12_500) == (13, T0 + 13_000)
            assert await lookup(T0) == (0, T0)
            assert await lookup(T0 + 5_000) == (5, T0 + 5_000)
            assert await lookup(T0 + 60_000) is None
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 20}
            c.assign([tp])
            c.seek(tp, (await lookup(T0 + 12_500))[0])
            assert as_tuples(await get_n(c, 7)) == expected(records[13:], 13)
        finally:
            await stop(c)
    run(go())


def test_group_commit_then_broker_restart_resumes_at_commit(own_broker, topic_name):
    topic, group = topic_name("t"), topic_name("g")
    records = make_records(14, tag="grp")
    tp = TopicPartition(topic, 0)

    async def first():
        await create_topic(own_broker, topic)
        await produce(own_broker, topic, records[:10])
        c = consumer(own_broker, topic, group_id=group, **GROUP_TIMEOUTS)
        await c.start()
        try:
            got = []
            end = time.monotonic() + 20
            while len(got) < 6 and time.monotonic() < end:
                for recs in (await c.getmany(timeout_ms=300, max_records=6 - len(got))).values():
                    got.extend(recs)
            assert as_tuples(got) == expected(records[:6])
            await c.commit()  # the consumed position: offset 6
            assert await c.committed(tp) == 6
        finally:
            await stop(c)

    async def second():
        await produce(own_broker, topic, records[10:])
        c = consumer(own_broker, topic, group_id=group, **GROUP_TIMEOUTS)
        await c.start()
        try:
            assert await c.committed(tp) == 6
            assert as_tuples(await get_n(c, 8, timeout=20)) == expected(records[6:], 6)
            await c.commit({tp: OffsetAndMetadata(14, "done")})
            assert await c.committed(tp) == 14
        finally:
            await stop(c)

    run(first())
    own_broker.restart()
    run(second())


def test_delete_records_moves_log_start(broker, topic_name):
    topic = topic_name()
    records = make_records(10, tag="del")
    tp = TopicPartition(topic, 0)

    async def go():
        await create_topic(broker, topic)
        await produce(broker, topic, records)
        async with Admin(broker) as a:
            assert await a.delete_records({tp: RecordsToDelete(4)}, timeout_ms=10000) == {tp: 4}
        c = consumer(broker)
        await c.start()
        try:
            assert await c.beginning_offsets([tp]) == {tp: 4}
            assert await c.end_offsets([tp]) == {tp: 10}
        finally:
            await stop(c)
        assert as_tuples(await read_all(broker, topic, 6)) == expected(records[4:], 4)
        async with Admin(broker) as a:
            assert await a.delete_records({tp: RecordsToDelete(-1)}, timeout_ms=10000) == {tp: 10}
    run(go())


def test_delete_topic(broker, topic_name):
    topic, other = topic_name("gone"), topic_name("kept")

    async def go():
        await create_topic(broker, topic)
        await create_topic(broker, other)
        await produce(broker, topic, make_records(3))
        async with Admin(broker) as a:
            resp = await a.delete_topics([topic], timeout_ms=10000)
            assert [(t[0], t[1]) for t in resp.topic_error_codes] == [(topic, 0)]
            topics = await a.list_topics()
        assert topic not in topics and other in topics
    run(go())


def test_two_members_split_partitions_then_rebalance_on_leave(broker, topic_name):
    topic, group = topic_name("t"), topic_name("g")
    sent = {p: make_records(3, tag=f"p{p}", start=10 * p) for p in range(4)}

    async def wait_for(cond, timeout, what):
        end = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > end:
                raise TimeoutError(f"not within {timeout} s: {what}")
            await asyncio.sleep(0.05)

    def per_partition(records):
        return {p: [(r.offset, r.key, r.value) for r in records if r.partition == p] for p in range(4)}

    def want(ps, first):
        return {p: ([(first + i, k, v) for i, (k, v, _, _) in enumerate(sent[p])] if p in ps else [])
                for p in range(4)}

    async def member(c, got, stop):
        while not stop.is_set():
            batch = await c.getmany(timeout_ms=100)
            for recs in batch.values():
                got.extend(recs)
            if batch:
                await c.commit()

    def assigned(c):
        return {tp.partition for tp in c.assignment()}

    async def go():
        await create_topic(broker, topic, 4)
        a = consumer(broker, topic, group_id=group, client_id="aio-a", **GROUP_TIMEOUTS)
        b = consumer(broker, topic, group_id=group, client_id="aio-b", **GROUP_TIMEOUTS)
        got = {"a": [], "b": []}
        stop = {"a": asyncio.Event(), "b": asyncio.Event()}
        tasks = {}
        await a.start()
        try:
            tasks["a"] = asyncio.create_task(member(a, got["a"], stop["a"]))
            await wait_for(lambda: assigned(a) == {0, 1, 2, 3}, 20, "the first member holds all four partitions")
            await b.start()
            tasks["b"] = asyncio.create_task(member(b, got["b"], stop["b"]))
            await wait_for(lambda: len(assigned(a)) == 2 and len(assigned(b)) == 2
                           and assigned(a) | assigned(b) == {0, 1, 2, 3}, 25, "two members hold two partitions each")
            parts = {"a": assigned(a), "b": assigned(b)}
            for p in range(4):
                await produce(broker, topic, sent[p], partition=p)
            await wait_for(lambda: len(got["a"]) + len(got["b"]) >= 12, 15, "both members got their records")
            assert per_partition(got["a"]) == want(parts["a"], 0)
            assert per_partition(got["b"]) == want(parts["b"], 0)

            stop["b"].set()
            await tasks.pop("b")
            await b.stop()  # LeaveGroup
            await wait_for(lambda: assigned(a) == {0, 1, 2, 3}, 20, "the remaining member holds all partitions")
            before = len(got["a"])
            for p in range(4):
                sent[p] = make_records(2, tag=f"q{p}", start=10 * p + 3)
                await produce(broker, topic, sent[p], partition=p)
            await wait_for(lambda: len(got["a"]) >= before + 8, 15, "the remaining member got the new records")
            await asyncio.sleep(0.3)
            assert per_partition(got["a"][before:]) == want({0, 1, 2, 3}, 3)
        finally:
            for name, t in tasks.items():
                stop[name].set()
                await t
            await a.stop()
            await b.stop()
    run(go(), timeout=80)
