"""Compacted topics over the wire: `kafkalog serve` (a subprocess on 127.0.0.1, a free port) whose maintenance thread
cleans (``--override log.cleaner.backoff.ms=200`` and the other ``log.cleaner.*`` keys), read by confluent-kafka,
kcat and raw Fetch/DescribeConfigs frames.

The module's topic is created with confluent-kafka's AdminClient (``cleanup.policy=compact``, ``segment.bytes=1024``,
``min.cleanable.dirty.ratio=0.01``, ``segment.ms`` one minute, ``delete.retention.ms`` a day) and written in phases
two minutes apart in record time (idempotent and plain producers, four codecs, tombstones), the last phase a few
records of keys of their own: the active segment. The first idempotent producer's last batch holds only keys the
next phase writes again, so the cleaner must keep it as an empty batch (count 0) for the producer's state. The
fixture waits until the broker's cleaner has cleaned everything below the active segment (its
cleaner-offset-checkpoint says so and a consumer reads exactly the latest record per key). Then: consumers from the
beginning, seeks and committed offsets inside holes, ListOffsets (earliest, latest, max timestamp, every produced
timestamp), Fetch with one-byte limits (KIP-74: progress across holes and empty batches), the cleaner disabled,
DescribeConfigs of the compaction keys and of the broker's cleaner keys, bad ``log.cleaner.*`` keys refused at start.

Run: ``pytest tests/broker/test_compacted_topics.py`` (about 10 s).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

import kafkalog

from .conftest import Serve
from .wire import Wire

pytestmark = pytest.mark.usefixtures("deadline")

T0 = (int(time.time() * 1000) - 30 * 60_000) // 1000 * 1000   # record time: half an hour ago
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
                "segment.ms": "60000", "delete.retention.ms": "86400000", "min.compaction.lag.ms": "0"}
# the broker's cleaner keys (every one kafkalog takes), values a test can recognise in DescribeConfigs
CLEANER_OVERRIDES = {"log.cleaner.backoff.ms": "200", "log.cleaner.enable": "true", "log.cleaner.threads": "1",
                     "log.cleaner.dedupe.buffer.size": "8388608", "log.cleaner.io.buffer.load.factor": "0.75",
                     "log.cleaner.delete.retention.ms": "7777000", "log.cleaner.min.cleanable.ratio": "0.3",
                     "log.cleaner.min.compaction.lag.ms": "0", "log.cleaner.max.compaction.lag.ms": "999999999"}
CLEAN_WAIT_S = 20
CONFIG_SOURCE = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}


def _env() -> dict:
    """The environment of `python -m kafkalog`: the kafkalog these tests import (as tests/conftest.py's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(kafkalog.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONSAFEPATH"] = "1"
    return env


def _serve(data: Path, overrides: dict) -> Serve:
    args = ["--data-dir", data, "--listen", "127.0.0.1:0", "--override", "auto.create.topics.enable=false"]
    for k, v in overrides.items():
        args += ["--override", f"{k}={v}"]
    return Serve(args, _env())


def _kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    assert path, "kcat is not installed (Debian: apt-get install kcat): these tests need it"
    return path


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 0})


def _create(bootstrap: str, topic: str, config: dict) -> None:
    admin = _admin(bootstrap)  # kept alive until the answer is in (a dropped handle fails its futures)
    futs = admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=10)
    futs[topic].result(15)


def _workload() -> list[dict]:
    """Phases two minutes apart in record time (``at``: minutes), each a producer of its own (codec, idempotent or
    not) flushed every few records (a batch each)."""
    pool = [f"k{i}".encode() for i in range(10)]
    phases = []
    # minute 0, idempotent: its last batch (the last flush group) writes only keys minute 2 writes again; then a
    # plain producer in the same minute: that empty batch is not its segment's last, only its producer keeps it
    recs = [(pool[i % 10] if i % 4 else f"u0-{i}".encode(), None if i % 11 == 6 else f"p0-{i}".encode())
            for i in range(36)]
    recs += [(pool[0], b"p0-last-a"), (pool[1], b"p0-last-b"), (pool[2], b"p0-last-c")]
    phases.append({"at": 0, "codec": "gzip", "idempotent": True, "records": recs, "flush_every": 6, "last_group": 3})
    phases.append({"at": 0, "codec": "none", "idempotent": False, "flush_every": 4,
                   "records": [(f"own-{i}".encode(), f"plain-{i}".encode()) for i in range(8)]})
    recs = [(pool[(i * 3) % 10], f"p1-{i}-{'x' * (i % 7 * 9)}".encode()) for i in range(30)]
    recs += [(b"tomb", b"alive"), (b"tomb", None), (b"k9", None)]   # tombstones as keys' last words (kept a day)
    phases.append({"at": 2, "codec": "lz4", "idempotent": False, "records": recs, "flush_every": 5})
    recs = [(pool[i % 5] if i % 2 else f"u2-{i}".encode(), f"p2-{i}".encode()) for i in range(20)]
    phases.append({"at": 4, "codec": "zstd", "idempotent": True, "records": recs, "flush_every": 4})
    phases.append({"at": 6, "codec": "snappy", "idempotent": False, "flush_every": 3,
                   "records": [(f"s{i}".encode(), b"sentinel") for i in range(3)]})
    for g, ph in enumerate(phases):
        t = T0 + ph["at"] * 60_000 + (10_000 if g == 1 else 0)
        ph["records"] = [{"key": k, "value": v, "headers": [("g", str(g).encode())] if i % 3 == 0 else [],
                          "timestamp": t + i * 100} for i, (k, v) in enumerate(ph["records"])]
    return phases


def _produce(bootstrap: str, topic: str, phases: list[dict]) -> list[tuple]:
    """Rows (offset, timestamp, key, value, headers) of every produced record."""
    rows = []
    for ph in phases:
        p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 0,
                      "enable.idempotence": ph["idempotent"], "compression.codec": ph["codec"], "linger.ms": 2,
                      "message.timeout.ms": 15000})
        reports: dict[int, tuple] = {}
        recs = ph["records"]
        last_group = len(recs) - ph.get("last_group", 0)
        for i, r in enumerate(recs):
            p.produce(topic, key=r["key"], value=r["value"], headers=r["headers"] or None, partition=0,
                      timestamp=r["timestamp"],
                      on_delivery=lambda err, msg, i=i, out=reports: out.__setitem__(i, (err, msg.offset())))
            if (i + 1) % ph["flush_every"] == 0 or i + 1 == last_group:
                assert p.flush(15) == 0
        assert p.flush(15) == 0, "records still queued after 15 s"
        bad = [v for v in reports.values() if v[0] is not None]
        assert not bad and len(reports) == len(recs), f"delivery errors: {bad[:3]}"
        rows += [(reports[i][1], r["timestamp"], r["key"], r["value"], r["headers"]) for i, r in enumerate(recs)]
        del p
    return rows


def _consumer(bootstrap: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 0,
                     "group.id": conf.pop("group.id", f"reader-{uuid.uuid4().hex[:8]}"), "enable.auto.commit": False,
                     "fetch.wait.max.ms": 50, **conf})


def _read(bootstrap: str, topic: str, start=OFFSET_BEGINNING, end: int | None = None, max_n: int | None = None,
          timeout: float = 15, **conf) -> list[tuple]:
    """confluent-kafka from ``start`` to the high watermark (or ``max_n`` records): rows."""
    c = _consumer(bootstrap, **conf)
    try:
        if end is None:
            end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        c.assign([TopicPartition(topic, 0, start)])
        out: list[tuple] = []
        deadline = time.monotonic() + timeout
        while (not out or out[-1][0] < end - 1) and (max_n is None or len(out) < max_n):
            assert time.monotonic() < deadline, f"read {len(out)} records from {start}, never reached {end}"
            for m in c.consume(1 if max_n else 500, timeout=0.3):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers() or []))
        return out
    finally:
        c.close()


def _cleaner_checkpoint(data: Path, topic: str) -> int:
    p = data / "cleaner-offset-checkpoint"
    if p.is_file():
        for line in p.read_text().splitlines()[2:]:
            t, part, off = line.rsplit(" ", 2)
            if t == topic and part == "0":
                return int(off)
    return -1


class Compacted:
    serve: Serve
    data: Path
    topic: str
    produced: list[tuple]
    expected: list[tuple]      # the latest record per key below the active segment, then the active segment
    sentinel: int
    removed: list[int]
    empty_producer_batch: tuple[int, int]   # (base, last) of phase 0's last batch: all its records superseded
    waited_s: float

    @property
    def bootstrap(self) -> str:
        return self.serve.bootstrap_servers

    def next_surviving(self, offset: int) -> int:
        return next(r[0] for r in self.expected if r[0] >= offset)


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    work = tmp_path_factory.mktemp("compacted")
    c = Compacted()
    c.data = work / "data"
    c.serve = _serve(c.data, CLEANER_OVERRIDES)
    try:
        c.topic = f"compacted-{uuid.uuid4().hex[:8]}"
        _create(c.bootstrap, c.topic, TOPIC_CONFIG)
        phases = _workload()
        c.produced = _produce(c.bootstrap, c.topic, phases)
        c.sentinel = c.produced[-len(phases[-1]["records"])][0]
        latest = {r[2]: r[0] for r in c.produced if r[0] < c.sentinel}
        c.expected = [r for r in c.produced if r[0] >= c.sentinel or latest[r[2]] == r[0]]
        c.removed = sorted({r[0] for r in c.produced} - {r[0] for r in c.expected})
        n0 = len(phases[0]["records"])
        c.empty_producer_batch = (c.produced[n0 - 3][0], c.produced[n0 - 1][0])
        t = time.monotonic()
        want = [r[0] for r in c.expected]
        got: list[int] = []
        while True:
            if _cleaner_checkpoint(c.data, c.topic) == c.sentinel:
                got = [r[0] for r in _read(c.bootstrap, c.topic)]
                if got == want:
                    break
            assert c.serve.proc.poll() is None, f"kafkalog serve exited: {c.serve.stderr()[-3000:]}"
            if time.monotonic() - t > CLEAN_WAIT_S:
                pytest.fail(f"the broker's cleaner did not clean {c.topic} within {CLEAN_WAIT_S} s (checkpoint "
                            f"{_cleaner_checkpoint(c.data, c.topic)}, active segment at {c.sentinel}):\n"
                            f"  expected {want}\n  read     {got}\n{c.serve.stderr()[-3000:]}", pytrace=False)
            time.sleep(0.1)
        c.waited_s = round(time.monotonic() - t, 2)
        yield c
    finally:
        code, _, err = c.serve.stop()
        shutil.rmtree(work, ignore_errors=True)
    assert code == 0, f"kafkalog serve exited {code} on SIGTERM: {err[-3000:]}"


def test_workload_left_holes_tombstones_and_an_empty_batch(compacted):
    c = compacted
    assert c.removed and any(b - a > 1 for a, b in zip([r[0] for r in c.expected], [r[0] for r in c.expected][1:]))
    assert any(r[3] is None for r in c.expected if r[0] < c.sentinel), "no tombstone is a key's last word"
    base, last = c.empty_producer_batch
    assert all(o in c.removed for o in range(base, last + 1)), "phase 0's last batch was meant to empty"
    # the broker's own files: the empty batch is there (count 0) with the producer's id, as Kafka keeps it
    with kafkalog.LogStore(c.data, read_only=True) as st:
        log = st.log(c.topic, 0)
        assert [(r.offset, r.key, r.value) for r in log.records()] == [(r[0], r[2], r[3]) for r in c.expected]
        assert len(log.segments()) > 2
        bases = [s.base_offset for s in log.segments()]
    batches = _raw_batches(c)
    empty = [b for b in batches if b["count"] == 0]
    assert any((b["base"], b["last"]) == c.empty_producer_batch and b["producer_id"] >= 0 for b in empty), empty
    # ... and not as the last batch of its segment (which the cleaner keeps anyway): a batch follows in the segment
    i = next(i for i, b in enumerate(batches) if (b["base"], b["last"]) == c.empty_producer_batch)
    seg_end = min((x for x in bases if x > batches[i]["base"]), default=1 << 62)
    assert i + 1 < len(batches) and batches[i + 1]["base"] < seg_end, (batches[i:i + 2], bases)
    print(f"cleaned within {c.waited_s} s; {len(c.expected)} of {len(c.produced)} records survive; "
          f"{len(empty)} empty batches")


def test_confluent_and_kcat_read_latest_per_key(compacted):
    """From the beginning: exactly the latest record per key at its own offset (holes between), tombstones that are
    a key's last word included, the active segment's records all there; the same from kcat."""
    c = compacted
    assert _read(c.bootstrap, c.topic) == c.expected
    r = subprocess.run([_kcat(), "-b", c.bootstrap, "-X", "broker.address.family=v4", "-C", "-t", c.topic, "-p", "0",
                        "-o", "beginning", "-e", "-J", "-m", "10"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr[-2000:]
    msgs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    got = [(m["offset"], m["key"], m["payload"], m["ts"]) for m in msgs]
    assert got == [(o, k.decode(), None if v is None else v.decode(), ts) for o, ts, k, v, _ in c.expected]


def test_seek_into_holes_lands_on_next_surviving_record(compacted):
    """assign() at a removed offset (inside a removed batch, inside the empty batch's range, just before the active
    segment) reads first the next record that survived, from confluent-kafka and from kcat -o."""
    c = compacted
    base, last = c.empty_producer_batch
    holes = sorted({c.removed[0], c.removed[len(c.removed) // 2], base, last, c.removed[-1],
                    *c.removed[1::7]})
    problems = []
    for h in holes:
        want = c.next_surviving(h)
        got = _read(c.bootstrap, c.topic, start=h, max_n=1)
        if got[0][0] != want:
            problems.append(f"confluent-kafka from {h}: first record {got[0][0]}, expected {want}")
    for h in holes[:3]:
        r = subprocess.run([_kcat(), "-b", c.bootstrap, "-X", "broker.address.family=v4", "-C", "-t", c.topic, "-p",
                            "0", "-o", str(h), "-c", "1", "-J", "-m", "10"], capture_output=True, text=True,
                           timeout=30)
        first = json.loads(r.stdout.splitlines()[0])["offset"] if r.returncode == 0 and r.stdout.strip() else r.stderr
        if first != c.next_surviving(h):
            problems.append(f"kcat -o {h}: first record {first}, expected {c.next_surviving(h)}")
    assert not problems, "\n".join(problems)


def test_committed_offsets_and_list_offsets(compacted):
    """A group commits an offset inside a hole: OffsetFetch gives it back as committed, a member of the group
    resumes at the next surviving record. ListOffsets: earliest is the log start (0: compaction never moves it),
    latest the high watermark, max timestamp the active segment's last record, and each produced record's timestamp
    (a removed record's too) the first surviving record at or past it."""
    c = compacted
    group = f"g-{uuid.uuid4().hex[:8]}"
    hole = c.removed[len(c.removed) // 3]
    con = _consumer(c.bootstrap, **{"group.id": group})
    try:
        con.commit(offsets=[TopicPartition(c.topic, 0, hole)], asynchronous=False)
        assert [tp.offset for tp in con.committed([TopicPartition(c.topic, 0)], timeout=10)] == [hole]
    finally:
        con.close()
    con = _consumer(c.bootstrap, **{"group.id": group})
    try:
        con.assign([TopicPartition(c.topic, 0)])  # no offset given: the group's committed one
        msgs = []
        deadline = time.monotonic() + 15
        while not msgs and time.monotonic() < deadline:
            msgs = [m for m in con.consume(1, timeout=0.3) if m.error() is None]
        assert msgs and msgs[0].offset() == c.next_surviving(hole), (hole, msgs and msgs[0].offset())
    finally:
        con.close()

    admin = _admin(c.bootstrap)
    tp = TopicPartition(c.topic, 0)

    def ask(spec):
        return admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)

    hw = c.produced[-1][0] + 1
    assert ask(OffsetSpec.earliest()).offset == 0
    assert ask(OffsetSpec.latest()).offset == hw
    mx = ask(OffsetSpec.max_timestamp())
    assert (mx.offset, mx.timestamp) == (c.produced[-1][0], c.produced[-1][1])
    problems = []
    for ts in sorted({r[1] for r in c.produced} | {r[1] + 1 for r in c.produced[::5]} | {T0 - 1}):
        want = next((r for r in c.expected if r[1] >= ts), None)
        got = ask(OffsetSpec.for_timestamp(ts))
        if (got.offset, got.timestamp) != ((want[0], want[1]) if want else (-1, -1)):
            problems.append(f"timestamp {ts}: ({got.offset}, {got.timestamp}), expected {want and want[:2]}")
    # the same answers as the consumer API's offsets_for_times
    con = _consumer(c.bootstrap)
    try:
        for ts in (T0, c.produced[c.removed[0]][1], c.produced[c.removed[-1]][1]):
            [found] = con.offsets_for_times([TopicPartition(c.topic, 0, ts)], timeout=10)
            if found.offset != next(r[0] for r in c.expected if r[1] >= ts):
                problems.append(f"offsets_for_times({ts}) -> {found.offset}")
    finally:
        con.close()
    assert not problems, "\n".join(problems[:20])


def _parse_batches(records: bytes) -> list[dict]:
    """Batch headers of a Fetch answer's records (complete batches only; a trailing partial one is ignored)."""
    out, pos = [], 0
    while pos + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > len(records):
            break
        last_delta = struct.unpack_from(">i", records, pos + 23)[0]
        pid = struct.unpack_from(">q", records, pos + 43)[0]
        count = struct.unpack_from(">i", records, pos + 57)[0]
        out.append({"base": base, "last": base + last_delta, "count": count, "producer_id": pid, "size": 12 + length})
        pos += 12 + length
    return out


def _raw_batches(c: Compacted, partition_max_bytes: int = 1 << 20, max_bytes: int = 1 << 20) -> list[dict]:
    """Every batch of the partition, fetched from offset 0 with raw Fetch v11 requests of the given limits, each
    next fetch from the last batch's end; asserts each answer holds a complete batch (KIP-74) and ends on time."""
    out = []
    offset = 0
    hw = c.produced[-1][0] + 1
    with Wire(c.serve.port) as w:
        for _ in range(2 * len(c.produced) + 10):
            if offset >= hw:
                return out
            resp = w.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes,
                                  "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                  "topics": [{"topic": c.topic, "partitions": [
                                      {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                       "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}]}],
                                  "forgotten_topics_data": [], "rack_id": ""})
            part = resp["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["high_watermark"] == hw, part
            batches = _parse_batches(bytes(part["records"] or b""))
            assert batches, f"Fetch at {offset} (max_bytes {max_bytes}) answered no complete batch"
            if partition_max_bytes == 1:  # as Kafka: the first batch alone, whatever its size; but never headers
                # alone while records follow (issue 21): empty batches (count 0), then exactly one batch with records
                assert all(b["count"] == 0 for b in batches[:-1]) and (batches[-1]["count"] > 0 or len(batches) == 1)
                assert len(part["records"]) == sum(b["size"] for b in batches), (offset, batches)
            if batches[-1]["count"] == 0 and batches[-1]["last"] + 1 < hw:
                assert partition_max_bytes != 1, f"Fetch at {offset} answered only empty batches: {batches}"
            assert batches[-1]["last"] >= offset, (offset, batches)
            out += [b for b in batches if b["last"] >= offset]
            offset = batches[-1]["last"] + 1
    raise AssertionError(f"Fetch made no progress to the high watermark {hw}: at {offset}")


def test_one_byte_fetch_limits_make_progress(compacted):
    """KIP-74: a Fetch whose limits are one byte still answers the first batch at or past its offset whole, so a
    reader makes progress across holes; an empty batch (count 0) is answered with the next batch that has records
    (never headers alone: librdkafka reports MSG_SIZE_TOO_LARGE for such answers). Raw Fetch v11 frames walk
    the partition batch by batch; confluent-kafka with max.partition.fetch.bytes=1 (fetch.max.bytes at librdkafka's
    floor, 1000) reads the same records as with the defaults."""
    c = compacted
    small = _raw_batches(c, partition_max_bytes=1, max_bytes=1)
    big = _raw_batches(c)
    assert small == big, "one-byte fetches walked other batches than 1 MiB fetches"
    assert sum(b["count"] for b in small) == len(c.expected)
    assert any(b["count"] == 0 for b in small), "no empty batch was stepped over"
    # librdkafka's floors: fetch.max.bytes >= message.max.bytes >= 1000; the partition's limit is one byte
    got = _read(c.bootstrap, c.topic, **{"max.partition.fetch.bytes": 1, "fetch.max.bytes": 1000,
                                         "message.max.bytes": 1000, "receive.message.max.bytes": 2000})
    assert got == c.expected


def test_describe_configs_shows_compaction_keys(compacted):
    """DescribeConfigs over the wire: the topic's own compaction keys as set (DYNAMIC_TOPIC_CONFIG); a compacted
    topic without them takes the broker's log.cleaner.* values (STATIC_BROKER_CONFIG, that synonym first, then
    Kafka's default, in a raw v4 answer); the broker resource lists every log.cleaner.* key --override gave."""
    c = compacted
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    _create(c.bootstrap, plain, {"cleanup.policy": "compact,delete"})
    admin = _admin(c.bootstrap)
    res = {r.name: f.result(10) for r, f in admin.describe_configs(
        [ConfigResource("topic", c.topic), ConfigResource("topic", plain)]).items()}
    own = {k: (res[c.topic][k].value, res[c.topic][k].source) for k in TOPIC_CONFIG}
    assert own == {k: (v, CONFIG_SOURCE["DYNAMIC_TOPIC_CONFIG"]) for k, v in TOPIC_CONFIG.items()}
    inherited = {k: (res[plain][k].value, res[plain][k].source) for k in
                 ("cleanup.policy", "delete.retention.ms", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
                  "max.compaction.lag.ms")}
    assert inherited == {"cleanup.policy": ("compact,delete", CONFIG_SOURCE["DYNAMIC_TOPIC_CONFIG"]),
                         "delete.retention.ms": ("7777000", CONFIG_SOURCE["STATIC_BROKER_CONFIG"]),
                         "min.cleanable.dirty.ratio": ("0.3", CONFIG_SOURCE["STATIC_BROKER_CONFIG"]),
                         "min.compaction.lag.ms": ("0", CONFIG_SOURCE["STATIC_BROKER_CONFIG"]),
                         "max.compaction.lag.ms": ("999999999", CONFIG_SOURCE["STATIC_BROKER_CONFIG"])}
    with Wire(c.serve.port) as w:
        resp = w.call(32, 4, {"resources": [{"resource_type": 2, "resource_name": plain, "configuration_keys": [
            "delete.retention.ms", "min.cleanable.dirty.ratio", "cleanup.policy"]}],
            "include_synonyms": True, "include_documentation": False})
    got = {e["name"]: (e["value"], e["config_source"], [(s["name"], s["value"], s["source"]) for s in e["synonyms"]])
           for e in resp["results"][0]["configs"]}
    assert got == {
        "cleanup.policy": ("compact,delete", 1, [("cleanup.policy", "compact,delete", 1),
                                                 ("log.cleanup.policy", "delete", 5)]),
        "delete.retention.ms": ("7777000", 4, [("log.cleaner.delete.retention.ms", "7777000", 4),
                                               ("log.cleaner.delete.retention.ms", "86400000", 5)]),
        "min.cleanable.dirty.ratio": ("0.3", 4, [("log.cleaner.min.cleanable.ratio", "0.3", 4),
                                                 ("log.cleaner.min.cleanable.ratio", "0.5", 5)])}, got
    node = str(next(iter(admin.list_topics(timeout=10).brokers)))
    broker = next(iter(admin.describe_configs([ConfigResource("broker", node)]).values())).result(10)
    shown = {k: (broker[k].value, broker[k].source) for k in CLEANER_OVERRIDES}
    assert shown == {k: (v, CONFIG_SOURCE["STATIC_BROKER_CONFIG"]) for k, v in CLEANER_OVERRIDES.items()}


def test_keyless_record_refused_by_compacted_topic(compacted):
    c = compacted
    errors = []
    p = Producer({"bootstrap.servers": c.bootstrap, "broker.address.family": "v4", "log_level": 0,
                  "message.timeout.ms": 10000, "retries": 0})
    p.produce(c.topic, value=b"no key", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert [e and e.code() for e in errors] == [KafkaError.INVALID_RECORD], errors
    assert _read(c.bootstrap, c.topic)[-1][0] == c.produced[-1][0]


def test_cleaner_disabled_leaves_topic_uncleaned(tmp_path):
    """`--override log.cleaner.enable=false` (the backoff still 200 ms): the same workload stays whole, every
    record readable at its offset, long after the cleaner would have cleaned it (the module's broker cleans it in
    about a second), and no cleaner checkpoint is written."""
    data = tmp_path / "data"
    s = _serve(data, dict(CLEANER_OVERRIDES, **{"log.cleaner.enable": "false"}))
    try:
        topic = f"uncleaned-{uuid.uuid4().hex[:8]}"
        _create(s.bootstrap_servers, topic, TOPIC_CONFIG)
        produced = _produce(s.bootstrap_servers, topic, _workload())
        assert [r[0] for r in produced] == list(range(len(produced)))
        time.sleep(2.5)  # a dozen backoffs
        assert _read(s.bootstrap_servers, topic) == produced
        assert _cleaner_checkpoint(data, topic) == -1
        with kafkalog.LogStore(data, read_only=True) as st:
            assert len(st.log(topic, 0).segments()) > 2, "the workload did not roll segments"
    finally:
        code, _, err = s.stop()
    assert code == 0, err[-3000:]
    assert "log cleaner" not in err, err[-3000:]


@pytest.mark.parametrize("override,words", [
    ("log.cleaner.bogus=1", ["log.cleaner.bogus", "unknown"]),
    ("log.cleaner.backoff.ms=0", ["log.cleaner.backoff.ms", "0", "[1, "]),
    ("log.cleaner.enable=maybe", ["log.cleaner.enable", "maybe", "true or false"]),
    ("log.cleaner.dedupe.buffer.size=12", ["log.cleaner.dedupe.buffer.size", "12", "[1024, "]),
    # a broker synonym of a topic key: the message names the key given (Kafka: "Invalid value 1.5 for
    # configuration log.cleaner.min.cleanable.ratio: Value must be no more than 1")
    ("log.cleaner.min.cleanable.ratio=1.5", ["log.cleaner.min.cleanable.ratio", "1.5"]),
], ids=["unknown-key", "backoff-zero", "enable-not-bool", "dedupe-too-small", "synonym-ratio-above-1"])
def test_bad_cleaner_keys_refused_at_start(tmp_path, override, words):
    """A bad log.cleaner.* key or value: `kafkalog serve` exits non-zero at once, prints no ready line, and says so
    in one error line naming the key as given, the value and what is allowed."""
    r = subprocess.run([sys.executable, "-m", "kafkalog", "serve", "--data-dir", str(tmp_path / "data"), "--listen",
                        "127.0.0.1:0", "--override", override], capture_output=True, text=True, timeout=30,
                       env=_env(), stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kafkalog: error: "), r.stderr[-2000:]
    missing = [w for w in words if w not in lines[0]]
    assert not missing, f"`--override {override}`: the error {lines[0]!r} does not say {missing}"
