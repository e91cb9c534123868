"""Compacted topics between kafkalog and Apache Kafka 4.4.0: each side reads (and cleans) what the other cleaned.

(a) Kafka reads what kafkalog's cleaner wrote. kafkalog writes two compacted topics (``compact`` and
``compact,delete``): embedded ``append_batch`` batches of every codec (timestamps dipping inside batches, headers,
tombstones, an empty key) and, through an in-process ``kafkalog.Broker``, confluent-kafka idempotent producers (one
per codec; one of them writes only keys that are written again later, so its last batch is emptied and must stay
for its producer state). Two cleaning rounds (``Log.run_cleaner(force=True)``), the second one merging the
small cleaned segments into groups. A model computed from what was written and from Kafka's own reading of the
segments before each round (kafka-dump-log: batch headers, delete horizons) says exactly which records stay (the
latest per key; a tombstone until a round runs past its batch's KIP-534 delete horizon, which the first round that
keeps it stamps: round 2 runs at round 1's now + ``delete.retention.ms``), which batches stay, which stay empty
(count 0: a group's last batch, a producer's last batch) and what their headers are.
Then Kafka's code reads the cleaned segments: ``kafka-dump-log --deep-iteration --print-data-log`` (every batch
header and record, its "Non-consecutive offsets" report = the holes), ``--index-sanity-check`` and
``--verify-index-only`` on every index, DiskLab's FileRecords (``ensureValid`` on every batch, empty ones
included) and Kafka's UnifiedLog loading the cleaned partition with its indexes deleted (recovery must keep every
byte, the indexes it rebuilds must be ours byte for byte, its reads must be kafkalog's). Two things Kafka's code
does differently on these files are pinned down rather than hidden: DumpLogSegments' --verify-index-only reports a
"timestamp mismatch" for a time index entry on an empty batch (it compares with the records' largest timestamp,
-1; Kafka's own LogSegment indexes empty batches by their MaxTimestamp the same way), and Kafka's
fetchOffsetByTimestamp answers none for a target that only an empty batch (a producer's last, kept with its
MaxTimestamp as Kafka's writeEmptyHeader keeps it; a cleaned group's last carries -1) reaches in the first segment
it searches, where kafkalog answers the next record (counted and
printed; each such answer must be what Kafka's rule gives).

(b) kafkalog cleans what Kafka cleaned. The session's Kafka broker writes a compacted topic (confluent-kafka
producers, two of them idempotent; segments rolled by record time with ``segment.ms``; dirty ratio 0.01) and its
cleaner holes it. A hot copy of the partition dir plus Kafka's ``cleaner-offset-checkpoint`` line is opened as a
kafkalog data dir (the topic is registered from its directory; its compaction keys given with
``alter_topic_config``): kafkalog honours Kafka's checkpoint (nothing dirty, nothing done), then kafkalog appends
records that supersede Kafka's (every record of the idempotent producers' last batches among them), rolls and
cleans again: the result is the latest record per key over Kafka's survivors and ours, the producers' last batches
kept empty with their sequences, and kafka-dump-log and Kafka's UnifiedLog read it as kafkalog does. A second copy
without the checkpoint (every segment dirty: Kafka's cleaned segments are cleaned again) keeps every record.

(c) The same workload on both brokers. The same keyed records and tombstones (the same timestamps, so both roll
segments at the same offsets) go to Kafka and to a ``kafkalog serve`` of this module (``log.cleaner.backoff.ms=200``
and the other ``log.cleaner.*`` keys) before the module's first test (an autouse fixture: Kafka's cleaner, which
wakes every 15 s in the session's broker, works while (a) runs); both clean on their own; the fixtures poll both
(confluent-kafka) until each has cleaned everything below its active segment (at most 45 s after the produce),
then read both from the beginning with the Java consumer (DiskLab observe) and confluent-kafka: the latest value
per key, the surviving offsets and the holes are the same, and both equal the model; ListOffsets (earliest, latest,
max timestamp, by timestamp, timestamps of removed records included) answers the same; kafka-dump-log reads
kafkalog's cleaned segments as cleanly as Kafka's own and prints the same records, the same tombstones carrying a
KIP-534 delete horizon.

Run: ``pytest tests/compat/test_compaction_interop.py`` (about 40 s beyond the session's broker start on 2 cores:
~12 short JVMs, two at a time, and what is left of the wait for Kafka's cleaner).
"""

from __future__ import annotations

import concurrent.futures as futures
import json
import random
import re
import shutil
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kafkalog
from kafkalog._engine.batch import iter_batches

from .lab import KafkalogServer, LabError
from .test_disk_format import (
    _diff_rows,
    _text,
    disklab,
    disklab_json,
    dump_log,
    kafkalog_rows,
    non_consecutive,
    parse_kafka_dump,
    rec_row,
    segment_logs,
)

LAB_TEST_DEADLINE_S = 120
CODECS = ["none", "gzip", "lz4", "zstd", "snappy"]
DRM = 3_600_000  # delete.retention.ms in (a): a tombstone goes an hour after the cleaning that first kept it
TIMINGS: dict[str, float] = {}
KAFKA_TIME_LOOKUP_MISSES: list = []  # (topic, timestamp, kafkalog's answer) where Kafka's UnifiedLog answers none


def _timed(name: str, t0: float) -> None:
    TIMINGS[name] = round(time.monotonic() - t0, 2)


def _parallel(*calls):
    """Run the given zero-argument callables (JVMs, mostly) two at a time; their results in order."""
    with futures.ThreadPoolExecutor(max_workers=2) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def _copy_dir(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)
    return dst


def _base(f: Path) -> int:
    return int(Path(f).name[:20])


def _batches(dump: dict, files) -> list[dict]:
    """The batches kafka-dump-log printed for the given .log files, in file order, each with its file's base."""
    out = []
    for f in files:
        entry = dump.get(str(f))
        assert entry is not None, f"kafka-dump-log did not dump {f}"
        assert entry["trailing"] is None, f"{f}: {entry['trailing']}"
        for b in entry["batches"]:
            out.append(dict(b, file_base=_base(f)))
    return out


def _dump_rows(batches: list[dict]) -> list[tuple]:
    """(offset, timestamp, key text, value text) of every data record kafka-dump-log printed."""
    return [(r["offset"], r["timestamp"], r["key"], r["value"]) for b in batches if b["isControl"] == "false"
            for r in b["records"]]


def _shown_rows(rows: list[tuple]) -> list[tuple]:
    """kafkalog rows as kafka-dump-log prints them: (offset, timestamp, key text, value text)."""
    return [(r[0], r[1], _text(r[3]), _text(r[4])) for r in rows]


def _expected_pairs(files_offsets: dict[int, list[int]]) -> dict[int, list[tuple[int, int]]]:
    """What kafka-dump-log's "Non-consecutive offsets" report must list per file (by base): the first record of a
    file is compared with -1 (so reported unless it is offset 0), then each record with the one before it."""
    out = {}
    for base, offs in files_offsets.items():
        pairs, last = [], -1
        for o in offs:
            if o != last + 1:
                pairs.append((last, o))
            last = o
        if pairs:
            out[base] = pairs
    return out


# ================================================================================================================
# (a) Kafka reads what kafkalog's cleaner wrote
# ================================================================================================================

A_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 2048, "index.interval.bytes": 200,
            "delete.retention.ms": DRM, "min.cleanable.dirty.ratio": "0.01"}
A_TOPICS = {"compacted": A_CONFIG,
            "compact-delete": dict(A_CONFIG, **{"cleanup.policy": "compact,delete", "retention.ms": -1})}
KEYS = [f"key-{i:02d}".encode() for i in range(24)] + [b""]   # the empty key is a key (only null is refused)
HOT = KEYS[:10]                                               # written again in phase 3: older records go
SUPERSEDED_CODEC = "lz4"                                      # this idempotent producer writes HOT keys only


class Ours:
    """What (a) wrote and what each cleaning round did, per topic."""

    def __init__(self, root: Path):
        self.root = root
        self.written: dict[str, dict[int, tuple]] = {t: {} for t in A_TOPICS}   # offset -> row, as written
        self.copies: dict[str, Path] = {}       # "pre1", "post1" (= "pre2"), "post2": copies of the data dir
        self.stats: dict[tuple[str, int], object] = {}                           # (topic, round) -> CleanerStats
        self.now: dict[int, int] = {}           # round -> the now_ms given to the cleaner
        self.read: dict[tuple[str, str], list[tuple]] = {}                       # (topic, copy) -> kafkalog rows
        self.dump: dict = {}
        self.dump_run: subprocess.CompletedProcess | None = None

    def logs(self, copy: str, topic: str) -> list[Path]:
        return segment_logs(self.copies[copy] / f"{topic}-0")


def _embedded_phase(ours: Ours, log, topic: str, rng: random.Random, tag: str, n_batches: int, ts0: int,
                    keys: list[bytes], tombstone_every: int) -> None:
    ts = ts0
    i = 0
    for b in range(n_batches):
        n = rng.randint(1, 9)
        recs = []
        for _ in range(n):
            key = keys[rng.randrange(len(keys))]
            value = None if i % tombstone_every == tombstone_every - 1 else \
                f"{tag}-{i}-{'x' * rng.randint(0, 60)}".encode()
            headers = [] if i % 3 else [(f"h{i % 4}", f"{tag}{i}".encode())]
            ts += rng.randint(1, 50)
            recs.append((key, value, headers, ts - (30 if i % 5 == 2 else 0)))  # dips inside batches
            i += 1
        base = log.append_batch([r[1] for r in recs], keys=[r[0] for r in recs], timestamps=[r[3] for r in recs],
                                headers=[r[2] for r in recs], compression=CODECS[b % len(CODECS)])
        for j, (key, value, headers, t) in enumerate(recs):
            ours.written[topic][base + j] = rec_row(base + j, t, 0, key, value, headers)


def _append(ours: Ours, log, topic: str, recs: list[tuple], ts: int, codec: str) -> None:
    base = log.append_batch([v for _, v in recs], keys=[k for k, _ in recs], timestamps=[ts] * len(recs),
                            compression=codec)
    for j, (key, value) in enumerate(recs):
        ours.written[topic][base + j] = rec_row(base + j, ts, 0, key, value, [])


def _idempotent_phase(ours: Ours, bootstrap: str, topics, rng: random.Random, ts0: int) -> None:
    """One confluent-kafka idempotent producer per codec, a few flushed groups each (a batch per group and topic);
    every topic gets the same records."""
    ts = ts0
    for codec in CODECS:
        p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "enable.idempotence": True,
                      "acks": "all", "compression.codec": codec, "linger.ms": 5, "log_level": 0,
                      "message.timeout.ms": 20000})
        keys = HOT if codec == SUPERSEDED_CODEC else KEYS
        reports: list = []
        sent = []
        for _group in range(3):
            for _ in range(rng.randint(3, 7)):
                key = keys[rng.randrange(len(keys))]
                value = f"idem-{codec}-{len(sent)}-{'y' * rng.randint(0, 40)}".encode()
                headers = [("codec", codec.encode())] if len(sent) % 2 else None
                ts += rng.randint(1, 50)
                n = len(sent)
                sent.append((key, value, headers or [], ts))
                for topic in topics:
                    p.produce(topic, key=key, value=value, headers=headers, partition=0, timestamp=ts,
                              on_delivery=lambda err, msg, n=n, out=reports: out.append(
                                  (msg.topic(), n, err, msg.offset())))
            assert p.flush(20) == 0, f"{codec} producer: records still queued after 20 s"
        bad = [r for r in reports if r[2] is not None]
        assert not bad and len(reports) == len(sent) * len(topics), f"{codec} producer delivery errors {bad[:3]}"
        for topic, n, _, off in reports:
            key, value, headers, t = sent[n]
            ours.written[topic][off] = rec_row(off, t, 0, key, value, headers)
        del p


def _store(root: Path):
    return kafkalog.LogStore(root, exclusive=True, maintenance=False)


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> Ours:
    t_start = time.monotonic()
    work = tmp_path_factory.mktemp("cx-ours")
    root = work / "data"
    o = Ours(root)
    rng = random.Random(20261126)
    now = int(time.time() * 1000)
    try:
        # phase 1 (three hours ago): embedded batches of every codec; tombstones that will be a key's last word
        with _store(root) as st:
            for topic, cfg in A_TOPICS.items():
                st.create_topic(topic, 1, config=cfg)
                _embedded_phase(o, st.log(topic, 0), topic, random.Random(rng.random()), "p1", 45,
                                now - 3 * 3_600_000, KEYS, 7)
                # per codec a batch the cleaner must rewrite: a key of its own stays, a HOT key goes
                for codec in CODECS:
                    _append(o, st.log(topic, 0), topic, [(f"own-{codec}".encode(), codec.encode()),
                                                         (HOT[0], b"superseded")], now - 3 * 3_600_000 + 50_000, codec)
                # keys whose last word is a tombstone: kept (and stamped) by round 1, gone in round 2
                _append(o, st.log(topic, 0), topic, [(b"gone-0", b"g0"), (b"gone-1", b"g1"), (b"gone-0", None),
                                                     (b"gone-1", None)], now - 3 * 3_600_000 + 60_000, "zstd")
        # phase 2 (two hours ago): idempotent producers over the wire; the store's own cleaner kept off
        broker = kafkalog.Broker(root, listen="127.0.0.1:0", config={"log.cleaner.enable": False})
        broker.start()
        try:
            _idempotent_phase(o, broker.bootstrap_servers, list(A_TOPICS), random.Random(rng.random()),
                              now - 2 * 3_600_000)
        finally:
            broker.stop()
        # phase 3 (ten minutes ago): HOT keys again, recent tombstones (kept), then a roll and a tail
        with _store(root) as st:
            for topic in A_TOPICS:
                log = st.log(topic, 0)
                _embedded_phase(o, log, topic, random.Random(rng.random()), "p3", 14, now - 600_000, HOT, 6)
                log.roll()
                _embedded_phase(o, log, topic, random.Random(rng.random()), "t1", 2, now - 500_000,
                                [b"tail-1"], 1000)
        _copy_dir(root, work / "pre1")
        o.copies["pre1"] = work / "pre1"
        # round 1: everything below the active segment is dirty
        o.now[1] = int(time.time() * 1000)
        with _store(root) as st:
            for topic in A_TOPICS:
                o.stats[(topic, 1)] = st.log(topic, 0).run_cleaner(o.now[1], force=True)
        o.copies["post1"] = _copy_dir(root, work / "post1")
        # phase 4 (five minutes ago): more writes, a roll and a tail; round 2 merges cleaned segments into groups
        with _store(root) as st:
            for topic in A_TOPICS:
                log = st.log(topic, 0)
                _embedded_phase(o, log, topic, random.Random(rng.random()), "p4", 12, now - 300_000,
                                KEYS[5:20], 5)
                log.roll()
                _embedded_phase(o, log, topic, random.Random(rng.random()), "t2", 1, now - 200_000,
                                [b"tail-2"], 1000)
        o.copies["pre2"] = _copy_dir(root, work / "pre2")
        o.now[2] = o.now[1] + DRM + 1000  # past the delete horizons round 1 stamped: their tombstones go
        with _store(root) as st:
            for topic in A_TOPICS:
                o.stats[(topic, 2)] = st.log(topic, 0).run_cleaner(o.now[2], force=True)
        o.copies["post2"] = _copy_dir(root, work / "post2")
        for copy in ("pre1", "post1", "pre2", "post2"):
            with kafkalog.LogStore(o.copies[copy], read_only=True) as st:
                for topic in A_TOPICS:
                    o.read[(topic, copy)] = kafkalog_rows(st.log(topic, 0))
        _timed("a: kafkalog writes + 2 cleaning rounds", t_start)
        t = time.monotonic()
        files = [f for c in ("pre1", "post1", "pre2", "post2") for topic in A_TOPICS for f in o.logs(c, topic)]
        o.dump_run = dump_log(files, "--deep-iteration", "--print-data-log")
        o.dump = parse_kafka_dump(o.dump_run.stdout)
        _timed("a: kafka-dump-log over 4 copies", t)
        yield o
    finally:
        print("\ntimings (s):", json.dumps(TIMINGS))
        shutil.rmtree(work, ignore_errors=True)


def _horizon(b: dict) -> int | None:
    """A batch's KIP-534 delete horizon as kafka-dump-log prints it (``OptionalLong[ms]`` / ``OptionalLong.empty``)."""
    m = re.fullmatch(r"OptionalLong\[(-?\d+)\]", b["deleteHorizonMs"])
    return int(m[1]) if m else None


def _horizon_text(h: int | None) -> str:
    return "OptionalLong.empty" if h is None else f"OptionalLong[{h}]"


class Model:
    """What one cleaning round must leave, from what was there before it (Kafka's reading of the pre-round copy)
    and what the round says it did (its mapped end and its groups). Kafka's LogCleaner rules: below the mapped end a
    record stays when it is the latest of its key, and, when it is a tombstone, its batch has no delete horizon yet
    or the round runs before it (KIP-534); a batch that keeps a tombstone and has no horizon gets ``now +
    delete.retention.ms``; a batch that keeps nothing goes unless it is its producer's last: then it stays empty,
    as DefaultRecordBatch.writeEmptyHeader writes it (a group's last batch gets nothing more, as in Kafka)."""

    def __init__(self, ours: Ours, topic: str, rnd: int):
        pre, post = ("pre1", "post1") if rnd == 1 else ("pre2", "post2")
        stats = ours.stats[(topic, rnd)]
        assert stats is not None, f"{topic}: cleaning round {rnd} did nothing"
        now = ours.now[rnd]
        self.stats = stats
        self.pre_files = ours.logs(pre, topic)
        self.post_files = ours.logs(post, topic)
        self.pre_batches = _batches(ours.dump, self.pre_files)
        self.end = stats.end_offset
        rows = {r[0]: r for r in ours.read[(topic, pre)]}
        self.pre_rows = rows
        latest: dict[bytes, int] = {}
        for off, r in sorted(rows.items()):
            if off < self.end:
                latest[r[3]] = off
        batch_of = {r["offset"]: b for b in self.pre_batches for r in b["records"]}
        self.dropped_tombstones = []   # the latest of their key, their batch's horizon passed
        self.kept_tombstones = []
        keep = set()
        for off, r in rows.items():
            if off >= self.end:
                keep.add(off)
            elif latest[r[3]] == off:
                h = _horizon(batch_of[off])
                if r[4] is None and h is not None and now >= h:
                    self.dropped_tombstones.append(off)
                else:
                    keep.add(off)
                    if r[4] is None:
                        self.kept_tombstones.append(off)
        self.keep = keep
        self.rows = [rows[o] for o in sorted(keep)]
        group_ends = {nxt - 1 for _, nxt, _ in stats.swaps}
        last_of_pid: dict[int, int] = {}
        for b in self.pre_batches:
            if int(b["producerId"]) >= 0:
                last_of_pid[int(b["producerId"])] = max(last_of_pid.get(int(b["producerId"]), -1),
                                                        int(b["lastOffset"]))
        self.batches = []
        self.empty_group_last = self.empty_producer_last = self.emptied_group_last = self.stamped = 0
        for b in self.pre_batches:
            base, last, pid = int(b["baseOffset"]), int(b["lastOffset"]), int(b["producerId"])
            fields = {k: b[k] for k in ("baseOffset", "lastOffset", "baseSequence", "lastSequence", "producerId",
                                        "producerEpoch", "partitionLeaderEpoch", "isTransactional", "isControl",
                                        "magic", "timestamp_type")}
            if base >= self.end:
                self.batches.append(dict(fields, count=b["count"], compresscodec=b["compresscodec"],
                                         max_timestamp=b["max_timestamp"], deleteHorizonMs=b["deleteHorizonMs"],
                                         records=[r["offset"] for r in b["records"]]))
                continue
            kept = [r for r in b["records"] if r["offset"] in keep]
            if kept:
                h = _horizon(b)
                if h is None and any(rows[r["offset"]][4] is None for r in kept):
                    h = now + DRM
                    self.stamped += 1
                self.batches.append(dict(fields, count=str(len(kept)), compresscodec=b["compresscodec"],
                                         max_timestamp=str(max(r["timestamp"] for r in kept)),
                                         deleteHorizonMs=_horizon_text(h), records=[r["offset"] for r in kept]))
            elif pid >= 0 and last_of_pid[pid] == last:
                # a producer's last stays as Kafka's writeEmptyHeader leaves it, its MaxTimestamp kept
                self.empty_producer_last += 1
                self.empty_group_last += last in group_ends
                self.batches.append(dict(fields, count="0", compresscodec="none", max_timestamp=b["max_timestamp"],
                                         deleteHorizonMs="OptionalLong.empty", records=[]))
            else:
                self.emptied_group_last += last in group_ends  # gone, as in Kafka: nothing is kept for offsets


def _post_batch_view(b: dict) -> dict:
    keys = ("baseOffset", "lastOffset", "baseSequence", "lastSequence", "producerId", "producerEpoch",
            "partitionLeaderEpoch", "isTransactional", "isControl", "magic", "timestamp_type", "count",
            "compresscodec", "max_timestamp", "deleteHorizonMs")
    return dict({k: b[k] for k in keys}, records=[r["offset"] for r in b["records"]])


ROUNDS = [(t, r) for t in A_TOPICS for r in (1, 2)]
ROUND_IDS = [f"{t}-round{r}" for t, r in ROUNDS]


def test_a_workload_is_what_we_meant(ours):
    """The workload exercises what the other tests rely on: records read back as written before cleaning; each
    round cleaned every segment below the active one (and only those), removed records and stamped delete horizons
    on batches keeping tombstones; round 1 removed no tombstone that is its key's last word, kept an empty batch
    for an idempotent producer's last batch and removed a group's emptied last batch; round 2 (past round 1's
    horizons) removed
    tombstones and merged cleaned segments into groups of at most segment.bytes; every codec was rewritten."""
    for topic in A_TOPICS:
        written = [r for _, r in sorted(ours.written[topic].items())]
        assert_rows_prefix(written, ours.read[(topic, "pre1")], topic)
        assert ours.read[(topic, "pre2")] == ours.read[(topic, "post1")] + [
            r for r in written if r[0] >= ours.read[(topic, "pre1")][-1][0] + 1]
        for rnd in (1, 2):
            m = Model(ours, topic, rnd)
            s = m.stats
            assert s.first_dirty == (0 if rnd == 1 else ours.stats[(topic, 1)].end_offset), s
            assert m.end == _base(m.pre_files[-1]), f"{topic} round {rnd}: mapped end {m.end}, active segment " \
                                                    f"{m.pre_files[-1].name}"
            assert s.records_removed > 0 and len(m.keep) < len(m.pre_rows), s
            assert s.segments_in == len([f for f in m.pre_files if _base(f) < m.end]), s
            # groups: consecutive segments, together at most segment.bytes (one segment may be alone and bigger)
            sizes = {_base(f): f.stat().st_size for f in m.pre_files}
            for gbase, gnext, n in s.swaps:
                members = [x for x in sizes if gbase <= x < gnext]
                assert len(members) == n and (n == 1 or sum(sizes[x] for x in members) <= A_CONFIG["segment.bytes"]), \
                    (topic, rnd, s.swaps, sizes)
            assert m.kept_tombstones and m.stamped, (topic, rnd, m.kept_tombstones, m.stamped)
            if rnd == 1:
                assert not m.dropped_tombstones, m.dropped_tombstones  # no batch had a horizon yet
                assert m.emptied_group_last and m.empty_producer_last, (m.emptied_group_last, m.empty_producer_last)
            else:
                assert m.dropped_tombstones, "round 2 (past round 1's horizons) removed no tombstone"
                assert any(n > 1 for _, _, n in s.swaps), f"{topic}: round 2 merged no segments: {s.swaps}"
        # every codec among the batches the cleaner rewrote (records kept, others removed), over both rounds
        codecs = set()
        for rnd, post in ((1, "post1"), (2, "post2")):
            end = ours.stats[(topic, rnd)].end_offset
            pre = {b["baseOffset"]: b for b in _batches(ours.dump, ours.logs("pre1" if rnd == 1 else "pre2", topic))}
            codecs |= {b["compresscodec"] for b in _batches(ours.dump, ours.logs(post, topic))
                       if int(b["baseOffset"]) < end and b["count"] not in ("0", pre[b["baseOffset"]]["count"])}
        assert set(CODECS) <= codecs, f"{topic}: codecs of rewritten batches {codecs}"
        pids = {b["producerId"] for b in _batches(ours.dump, ours.logs("pre1", topic))} - {"-1"}
        assert len(pids) == len(CODECS), f"{topic}: producer ids on disk {pids}"


def assert_rows_prefix(written: list[tuple], read: list[tuple], topic: str) -> None:
    want = written[:len(read)]
    assert read == want, _diff_rows(want, read, f"{topic}: kafkalog records() before cleaning vs what was written")


@pytest.mark.parametrize("topic,rnd", ROUNDS, ids=ROUND_IDS)
def test_a_kafka_dump_log_reads_cleaned_segments(ours, topic, rnd):
    """kafka-dump-log over the segments after the round: the batches and records the model says (base offsets,
    last offsets, producer id/epoch/sequences, count, codec, MaxTimestamp; empty batches as count 0, codec none),
    every batch valid, nothing after the last batch; the records it prints are what kafkalog's engine reads; the
    holes it reports are the model's."""
    m = Model(ours, topic, rnd)
    post = "post1" if rnd == 1 else "post2"
    batches = _batches(ours.dump, m.post_files)
    bad = [b for b in batches if b["isvalid"] != "true" or b["magic"] != "2"]
    assert not bad, f"{topic}: invalid batches after round {rnd}: {bad[:3]}"
    got = [_post_batch_view(b) for b in batches]
    if got != m.batches:
        exp = {b["baseOffset"]: b for b in m.batches}
        have = {b["baseOffset"]: b for b in got}
        diffs = []
        for base in sorted(set(exp) | set(have), key=int):
            e, g = exp.get(base), have.get(base)
            if e != g:
                fields = sorted(k for k in set(e or {}) | set(g or {}) if (e or {}).get(k) != (g or {}).get(k))
                diffs.append(f"  batch {base}: " + ("missing" if g is None else "unexpected" if e is None else
                             ", ".join(f"{k}: expected {e.get(k)} got {g.get(k)}" for k in fields)))
        raise AssertionError(f"{topic} round {rnd}: kafka-dump-log shows {len(got)} batches, the model "
                             f"{len(m.batches)}; {len(diffs)} differ:\n" + "\n".join(diffs[:12]))
    # records: kafka-dump-log's == kafkalog's read == the model's
    assert_same_rows(_shown_rows(m.rows), _dump_rows(batches), f"{topic} round {rnd}: kafka-dump-log vs model")
    assert ours.read[(topic, post)] == m.rows, _diff_rows(m.rows, ours.read[(topic, post)],
                                                           f"{topic} round {rnd}: kafkalog records() vs model")
    # files: one per group (named by its first segment), the segments above the mapped end untouched
    assert [_base(f) for f in m.post_files] == [b for b, _, _ in m.stats.swaps] + [
        _base(f) for f in m.pre_files if _base(f) >= m.end]
    # holes, as kafka-dump-log reports them
    per_file = {_base(f): [r["offset"] for b in ours.dump[str(f)]["batches"] for r in b["records"]]
                for f in m.post_files}
    reported = {_base(Path(f)): pairs for f, pairs in non_consecutive(ours.dump_run.stderr).items()
                if Path(f).parent == m.post_files[0].parent}
    assert reported == _expected_pairs(per_file), (reported, _expected_pairs(per_file))
    assert any(a != -1 for pairs in reported.values() for a, _ in pairs), f"{topic}: no hole inside a segment"


def assert_same_rows(expected: list[tuple], got: list[tuple], what: str) -> None:
    assert got == expected, _diff_rows(expected, got, what)


@pytest.fixture(scope="module")
def ours_by_kafka(ours, tmp_path_factory) -> dict:
    """Kafka's index checks, FileRecords and UnifiedLog over the cleaned copies (one JVM each, two at a time)."""
    t = time.monotonic()
    work = tmp_path_factory.mktemp("cx-ours-kafka")
    logs = [f for c in ("post1", "post2") for topic in A_TOPICS for f in ours.logs(c, topic)]
    indexes = [f.with_suffix(s) for f in logs for s in (".index", ".timeindex")]
    # Kafka's UnifiedLog over copies of the final partitions with every index deleted (recovery rebuilds them)
    requests, before = [], {}
    for topic, cfg in A_TOPICS.items():
        dst = _copy_dir(ours.copies["post2"] / f"{topic}-0", work / f"{topic}-0")
        for p in list(dst.iterdir()):
            if p.suffix in (".index", ".timeindex"):
                before[str(p)] = p.read_bytes()
                p.unlink()
            elif p.suffix == ".log":
                before[str(p)] = p.read_bytes()
            elif not p.name.endswith(".metadata"):
                p.unlink()  # kafkalog's own lock and generation files
        rows = ours.read[(topic, "post2")]
        ts = sorted({r[1] for r in ours.written[topic].values()})
        targets = sorted({0, *ts[::5], *(x + 1 for x in ts[::7]), ts[-1] + 1})
        requests.append({"dir": str(dst), "topic": topic, "log_start": 0, "recovery_point": 0, "clean": False,
                         "config": {"cleanup.policy": cfg["cleanup.policy"],
                                    "index.interval.bytes": str(cfg["index.interval.bytes"]),
                                    "segment.bytes": str(1 << 20)},
                         "timestamps": [-2, -1, *targets]})
        assert rows
    req = work / "load.json"
    req.write_text(json.dumps(requests))
    sanity, verify, plain, records, load = _parallel(
        lambda: dump_log(indexes, "--index-sanity-check"),
        lambda: dump_log(indexes, "--verify-index-only"),
        lambda: dump_log([i for i in indexes if i.suffix == ".timeindex"]),
        lambda: disklab("records", *logs),
        lambda: disklab_json("load", req))
    by_file: dict[str, list[dict]] = {str(p): [] for p in logs}
    for line in records.stdout.split("\n"):
        if line.startswith("{"):
            b = json.loads(line)
            by_file[b["file"]].append(b)
    after = {p: (Path(p).read_bytes() if Path(p).exists() else None) for p in before}
    _timed("a: Kafka's index checks, FileRecords, UnifiedLog", t)
    return {"sanity": sanity, "verify": verify, "plain": plain, "records": by_file, "load": load,
            "requests": requests, "before": before, "after": after, "indexes": indexes}


def _time_index_entries(plain_stdout: str) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    cur = None
    for line in plain_stdout.split("\n"):
        if line.startswith("Dumping "):
            cur = out.setdefault(line[len("Dumping "):], [])
        elif cur is not None and (m := re.fullmatch(r"timestamp: (-?\d+) offset: (-?\d+)", line.strip())):
            cur.append((int(m[1]), int(m[2])))
    return out


def _verify_index_report(stderr: str, dump: dict) -> tuple[int, list[str]]:
    """kafka-dump-log --verify-index-only's stderr: (entries tolerated, problems). Tolerated: "Found timestamp
    mismatch" lines "Index timestamp: X, log timestamp: -1" for a time index whose segment holds an empty batch
    (count 0) with MaxTimestamp X. DumpLogSegments takes the largest timestamp of the indexed batch's records (-1:
    none); Kafka's LogSegment indexes a batch by its header MaxTimestamp, empty or not."""
    tolerated, problems, cur = 0, [], None
    for line in stderr.split("\n"):
        if m := re.fullmatch(r"Found timestamp mismatch in :(\S+)", line.strip()):
            cur = m[1]
            continue
        m = re.fullmatch(r"Index timestamp: (-?\d+), log timestamp: -1", line.strip())
        entry = dump.get(str(Path(cur).with_suffix(".log"))) if cur and m else None
        if entry and any(b["count"] == "0" and int(b["max_timestamp"]) == int(m[1]) for b in entry["batches"]):
            tolerated += 1
        elif line.strip():
            cur = None
            problems.append(f"--verify-index-only: {line[:300]}")
    return tolerated, problems


def test_a_kafka_index_checks_on_cleaned_segments(ours, ours_by_kafka):
    """--index-sanity-check passes on every index of the cleaned segments. --verify-index-only finds nothing but
    what it also finds on Kafka's own cleaned segments: a time index entry on an empty batch (count 0) whose
    MaxTimestamp the entry carries, where DumpLogSegments compares with the records' largest timestamp (-1, none);
    Kafka's LogSegment indexes empty batches the same way (and the UnifiedLog test below rebuilds these very
    entries)."""
    k = ours_by_kafka
    problems = []
    for f in k["indexes"]:
        if f"{f} passed sanity check." not in k["sanity"].stdout and not (
                f.suffix == ".index" and f"{f} is empty." in k["sanity"].stdout):
            problems.append(f"{f}: not passed by --index-sanity-check")
    tolerated, bad = _verify_index_report(k["verify"].stderr, ours.dump)
    problems += bad
    for phrase in ("Mismatches in", "indexed offsets are not found", "out of order", "Exception"):
        if phrase in k["verify"].stdout:
            problems.append(f"--verify-index-only stdout says '{phrase}'")
    assert not problems, "\n".join(problems[:20])
    entries = _time_index_entries(k["plain"].stdout)
    nonempty = sum(1 for v in entries.values() if v)
    assert nonempty >= len(entries) // 2, entries
    print(f"time index entries on empty batches (DumpLogSegments' timestamp mismatch): {tolerated}")


def test_a_kafka_record_reader_validates_cleaned_batches(ours, ours_by_kafka):
    """Kafka's FileRecords: ensureValid passes on every cleaned batch (empty ones too), counts and producer fields
    are what kafka-dump-log printed, record offsets lie inside their batch, nothing trails the last batch."""
    problems = []
    n_empty = 0
    for f, bs in ours_by_kafka["records"].items():
        printed = ours.dump[f]["batches"]
        if len(printed) != len(bs):
            problems.append(f"{f}: FileRecords {len(bs)} batches, kafka-dump-log {len(printed)}")
            continue
        for b, p in zip(bs, printed):
            if b["valid"] != "ok" or b["magic"] != 2 or b["control"] or b["transactional"]:
                problems.append(f"{f}: batch {b['base_offset']}: valid={b['valid']}")
            if b["count"] != len(b["records"]) or str(b["count"]) != p["count"]:
                problems.append(f"{f}: batch {b['base_offset']}: count {b['count']}, {len(b['records'])} records")
            if (b["producer_id"], b["producer_epoch"], b["base_sequence"]) != (
                    int(p["producerId"]), int(p["producerEpoch"]), int(p["baseSequence"])):
                problems.append(f"{f}: batch {b['base_offset']}: producer fields differ from kafka-dump-log's")
            if any(not b["base_offset"] <= r["offset"] <= b["last_offset"] for r in b["records"]):
                problems.append(f"{f}: batch {b['base_offset']}: a record outside [base, last]")
            n_empty += b["count"] == 0
    assert n_empty > 0
    assert not problems, "\n".join(problems[:20])


def test_a_kafka_unified_log_loads_cleaned_partitions(ours, ours_by_kafka):
    """Kafka's UnifiedLog over the final cleaned partitions, indexes deleted, recovery point 0: recovery keeps every
    byte of every .log (holes and empty batches are valid to Kafka), the indexes it rebuilds are ours byte for byte
    (plus the zero tail Kafka leaves on the active segment's), it reads kafkalog's records, and its log start/end
    are kafkalog's. By timestamp: kafkalog's offset_for_time answers the first record at or past the target (the
    ListOffsets contract); Kafka's fetchOffsetByTimestamp answers what its own rule gives on these files (the first
    segment whose largest timestamp reaches the target, searched alone), which is none where that segment's records
    all lie before the target and only an empty batch (a producer's last, which keeps its MaxTimestamp as in Kafka)
    reaches it: those targets are counted and printed (an interop difference, not an error of either reader)."""
    k = ours_by_kafka
    problems = []
    for path, data in k["before"].items():
        now = k["after"][path]
        if path.endswith(".log"):
            if now != data:
                problems.append(f"{path}: Kafka's recovery changed the .log")
        elif now is None or now[:len(data)] != data or any(now[len(data):]):
            problems.append(f"{path}: Kafka rebuilt {None if now is None else len(now)} bytes that are not ours "
                            f"({len(data)} bytes + zero padding)")
    with kafkalog.LogStore(ours.copies["post2"], read_only=True) as st:
        for rq, ans in zip(k["requests"], k["load"]):
            topic = rq["topic"]
            log = st.log(topic, 0)
            if (ans["log_start"], ans["log_end"]) != (log.log_start_offset, log.log_end_offset):
                problems.append(f"{topic}: Kafka loads [{ans['log_start']}, {ans['log_end']}), kafkalog "
                                f"[{log.log_start_offset}, {log.log_end_offset})")
            theirs = [rec_row(r["offset"], r["timestamp"], 0, _unhex(r["key"]), _unhex(r["value"]),
                              [(h, _unhex(v)) for h, v in r["headers"]]) for r in ans["records"]]
            mine = kafkalog_rows(log)
            if theirs != mine:
                problems.append(_diff_rows(mine, theirs, f"{topic}: Kafka's UnifiedLog.read vs kafkalog"))
            # Kafka's fetchOffsetByTimestamp searches only the first segment whose largest timestamp (its time
            # index's last entry, which counts empty batches' MaxTimestamp) reaches the target; kafkalog's
            # offset_for_time goes on to the next segment when that one holds no record at or past the target
            files = [(int(Path(f).name[:20]), _batches(ours.dump, [f])) for f in ours.logs("post2", topic)]
            for t in rq["timestamps"]:
                found = log.offset_for_time(t)
                got = None if found is None else [found.timestamp, found.offset]
                want = ans["by_timestamp"][str(t)]
                if t < 0:
                    got, want = got and got[1:], want and want[1:]
                    if got != want:
                        problems.append(f"{topic}: {t}: Kafka's offset {want}, kafkalog's {got}")
                    continue
                first = next(([r[1], r[0]] for r in mine if r[1] >= t), None)
                if got != first:
                    problems.append(f"{topic}: timestamp {t}: kafkalog's offset_for_time {got}, the first record "
                                    f"at or past it {first}")
                seg = next((bs for _, bs in files if max(int(b["max_timestamp"]) for b in bs) >= t), None)
                in_seg = None if seg is None else next(
                    ([r["timestamp"], r["offset"]] for b in seg for r in b["records"] if r["timestamp"] >= t), None)
                if want != in_seg:
                    problems.append(f"{topic}: timestamp {t}: Kafka's fetchOffsetByTimestamp {want}, its rule says "
                                    f"{in_seg}")
                if want is None and first is not None:
                    KAFKA_TIME_LOOKUP_MISSES.append((topic, t, first))
    print(f"targets Kafka's UnifiedLog answers with none, kafkalog with a later record: "
          f"{len(KAFKA_TIME_LOOKUP_MISSES)} {KAFKA_TIME_LOOKUP_MISSES[:3]}")
    assert not problems, "\n".join(problems[:30])


def _unhex(x):
    return None if x is None else bytes.fromhex(x)


# ================================================================================================================
# (b) and (c): the same compacted topic on Kafka and on kafkalog serve; both clean it
# ================================================================================================================

C_CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "60000",
            "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000"}
# kafkalog serve's cleaner keys: every log.cleaner.* key Kafka has that kafkalog takes, at a test's pace
KAFKALOG_CLEANER = {"log.cleaner.backoff.ms": 200, "log.cleaner.enable": "true", "log.cleaner.threads": 1,
                    "log.cleaner.dedupe.buffer.size": 16 << 20, "log.cleaner.io.buffer.load.factor": "0.9"}
WAIT_FOR_CLEANERS_S = 45  # Kafka's cleaner (log.cleaner.backoff.ms 15 s in the session's broker) wakes within 15 s


def _c_workload(t0: int) -> list[dict]:
    """Phases two minutes apart in record time (segment.ms is one minute: each phase starts a segment on both
    brokers), the last one a few records of keys of their own (the active segment: nothing above it is cleaned)."""
    rng = random.Random(4711)
    pool = [f"ck{i}".encode() for i in range(8)]
    phases = []
    for g, (codec, idem, n) in enumerate([("gzip", True, 26), ("lz4", False, 26), ("zstd", True, 14)]):
        recs = []
        for i in range(n):
            key = pool[rng.randrange(8)] if i % 3 != 1 else f"u{g}-{i}".encode()
            value = f"g{g}-{i}-{'z' * rng.randint(0, 80)}".encode()
            if g < 2 and i % 9 == 4:
                value = None                                     # tombstones, most of them superseded later
            recs.append({"key": key, "value": value, "headers": [("g", str(g).encode())] if i % 2 else [],
                         "timestamp": t0 + g * 120_000 + i * 100})
        if g == 0:
            recs.append({"key": b"tomb", "value": b"alive", "headers": [], "timestamp": t0 + 5000})
        if g == 1:  # the key's last word: a tombstone (kept a day: delete.retention.ms)
            recs.append({"key": b"tomb", "value": None, "headers": [], "timestamp": t0 + 120_000 + 5000})
        if g == 2:  # the idempotent producer's last batch keeps a record (never an empty batch's MaxTimestamp last)
            recs.append({"key": b"last-of-g2", "value": b"stays", "headers": [], "timestamp": t0 + 240_000 + 5000})
        phases.append({"codec": codec, "idempotent": idem, "records": recs})
    phases.append({"codec": "snappy", "idempotent": False,
                   "records": [{"key": f"s{i}".encode(), "value": f"sentinel-{i}".encode(), "headers": [],
                                "timestamp": t0 + 360_000 + i} for i in range(4)]})
    return phases


def _produce_phases(bootstrap: str, topic: str, phases: list[dict]) -> list[int]:
    """confluent-kafka: each phase its own producer (idempotent or not, its codec), flushed in two halves (two
    batches at least); the offsets in order."""
    offsets = []
    for ph in phases:
        p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 0,
                      "enable.idempotence": ph["idempotent"], "compression.codec": ph["codec"], "linger.ms": 5,
                      "message.timeout.ms": 20000})
        reports: dict[int, tuple] = {}
        recs = ph["records"]
        for i, r in enumerate(recs):
            p.produce(topic, key=r["key"], value=r["value"], headers=r["headers"] or None, partition=0,
                      timestamp=r["timestamp"],
                      on_delivery=lambda err, msg, i=i, out=reports: out.__setitem__(i, (err, msg.offset())))
            if i == len(recs) // 2:
                assert p.flush(20) == 0
        assert p.flush(20) == 0, f"{bootstrap}: records still queued after 20 s"
        bad = [v for v in reports.values() if v[0] is not None]
        assert not bad and len(reports) == len(recs), f"{bootstrap}: delivery errors {bad[:3]}"
        offsets += [reports[i][1] for i in range(len(recs))]
        del p
    return offsets


def _consume_all(bootstrap: str, topic: str, **conf) -> list[tuple]:
    """confluent-kafka reads the partition from the beginning to the high watermark: rows."""
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": f"cx-{uuid.uuid4()}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, "log_level": 0, **conf})
    try:
        _, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple] = []
        deadline = time.monotonic() + 20
        while not out or out[-1][0] < hi - 1:
            assert time.monotonic() < deadline, f"{bootstrap}: read {len(out)} records, never reached {hi}"
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, f"{bootstrap}: {m.error()}"
                ttype, ts = m.timestamp()
                out.append(rec_row(m.offset(), ts, ttype - 1, m.key(), m.value(), m.headers() or []))
        return out
    finally:
        c.close()


def _latest(rows) -> dict:
    out = {}
    for r in rows:
        out[r[3]] = r[4]
    return out


class Both:
    def __init__(self):
        self.topic = ""
        self.kafka = self.kafkalog = None
        self.produced: list[tuple] = []           # rows as produced, at their offsets
        self.expected: list[tuple] = []           # the model: latest per key below the sentinel, then the sentinel
        self.sentinel = 0
        self.read: dict[str, list[tuple]] = {}    # confluent-kafka, per broker, once both cleaned
        self.observe: dict[str, dict] = {}        # DiskLab observe (Java consumer, ListOffsets), per broker
        self.kafka_checkpoint = -1
        self.waited_s = 0.0
        self.specs: list = []
        self.work: Path | None = None
        self.produced_at = 0.0


def _kafka_cleaner_checkpoint(log_dir: Path, topic: str) -> int:
    p = log_dir / "cleaner-offset-checkpoint"
    if not p.is_file():
        return -1
    for line in p.read_text().splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return -1


@pytest.fixture(scope="module", autouse=True)
def both_started(kafka, tmp_path_factory) -> Both:
    """(b)/(c)'s workload is produced to both brokers before the module's first test (autouse), so that Kafka's
    cleaner (which wakes every 15 s) works while (a) runs; ``both`` then waits for the cleaners."""
    t_start = time.monotonic()
    work = tmp_path_factory.mktemp("cx-both")
    server = KafkalogServer(overrides=KAFKALOG_CLEANER)
    b = Both()
    b.work = work
    try:
        try:
            server.start(work / "kafkalog")
        except (LabError, OSError) as e:
            pytest.fail(f"kafkalog serve with {KAFKALOG_CLEANER} did not start: {e}\n{server.log_tail()}",
                        pytrace=False)
        b.kafka, b.kafkalog = kafka, server
        b.topic = f"cx-compacted-{uuid.uuid4().hex[:8]}"
        for srv in (kafka, server):
            admin = AdminClient({"bootstrap.servers": srv.bootstrap, "broker.address.family": "v4", "log_level": 0})
            fut = admin.create_topics([NewTopic(b.topic, 1, 1, config=C_CONFIG)], operation_timeout=20)
            fut[b.topic].result(30)
        t0 = (int(time.time() * 1000) - 30 * 60_000) // 1000 * 1000
        phases = _c_workload(t0)
        recs = [r for ph in phases for r in ph["records"]]
        offs = dict(zip(("kafka", "kafkalog"), _parallel(lambda: _produce_phases(kafka.bootstrap, b.topic, phases),
                                                         lambda: _produce_phases(server.bootstrap, b.topic, phases))))
        assert offs["kafka"] == offs["kafkalog"], "the brokers gave the same records different offsets"
        b.produced = [rec_row(o, r["timestamp"], 0, r["key"], r["value"], r["headers"])
                      for o, r in zip(offs["kafka"], recs)]
        b.sentinel = offs["kafka"][-len(phases[-1]["records"])]
        latest = {r[3]: r[0] for r in b.produced if r[0] < b.sentinel}
        keep = set(latest.values()) | {r[0] for r in b.produced if r[0] >= b.sentinel}
        b.expected = [r for r in b.produced if r[0] in keep]
        b.produced_at = time.monotonic()
        _timed("c: kafkalog serve start + produce to both", t_start)
        yield b
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _wait_cleaned(b: Both, names) -> None:
    """Poll (confluent-kafka) until each named broker has cleaned everything below its active segment (for Kafka:
    and its cleaner checkpoint says so), within WAIT_FOR_CLEANERS_S of the produce."""
    servers = {"kafka": b.kafka, "kafkalog": b.kafkalog}
    want = [r[0] for r in b.expected]
    seen: dict[str, list[int]] = {}
    while True:
        for name in names:
            if seen.get(name) != want:
                seen[name] = [r[0] for r in _consume_all(servers[name].bootstrap, b.topic)]
        if "kafka" in names:
            b.kafka_checkpoint = _kafka_cleaner_checkpoint(b.kafka.log_dir, b.topic)
        if all(v == want for v in seen.values()) and ("kafka" not in names or b.kafka_checkpoint == b.sentinel):
            return
        if time.monotonic() - b.produced_at > WAIT_FOR_CLEANERS_S:
            pytest.fail(f"{' and '.join(names)} did not clean within {WAIT_FOR_CLEANERS_S} s (Kafka's cleaner "
                        f"checkpoint {b.kafka_checkpoint}, the active segment at {b.sentinel}):\n  expected offsets "
                        f"{want}\n" + "\n".join(f"  {n}: {v}" for n, v in seen.items()), pytrace=False)
        time.sleep(0.5)


@pytest.fixture(scope="module")
def kafka_cleaned(both_started) -> Both:
    """Kafka's cleaner has cleaned the topic (what (b) needs); confluent-kafka's read of it."""
    b = both_started
    t = time.monotonic()
    _wait_cleaned(b, ["kafka"])
    b.waited_s = round(time.monotonic() - b.produced_at, 2)
    b.read["kafka"] = _consume_all(b.kafka.bootstrap, b.topic)
    _timed("c: wait for Kafka's cleaner (after the produce)", t)
    return b


@pytest.fixture(scope="module")
def both(kafka_cleaned) -> Both:
    """kafkalog's cleaner too; then the Java consumer and ListOffsets on both."""
    b = kafka_cleaned
    t = time.monotonic()
    _wait_cleaned(b, ["kafkalog"])
    b.read["kafkalog"] = _consume_all(b.kafkalog.bootstrap, b.topic)
    ts = sorted({r[1] for r in b.produced})
    b.specs = ["earliest", "latest", "max_timestamp", 0,
               *sorted({*ts, *(x - 1 for x in ts[::3]), *(x + 1 for x in ts[::3]), ts[-1] + 1000})]
    req = b.work / "observe.json"
    req.write_text(json.dumps({"reads": [{"topic": b.topic}], "commits": [],
                               "offsets": [{"topic": b.topic, "specs": b.specs}]}))
    answers = _parallel(lambda: disklab_json("observe", b.kafka.bootstrap, req),
                        lambda: disklab_json("observe", b.kafkalog.bootstrap, req))
    b.observe = dict(zip(("kafka", "kafkalog"), answers))
    _timed("c: kafkalog's cleaner, Java consumer + ListOffsets on both", t)
    return b


def _java_rows(observed: dict) -> list[tuple]:
    recs = observed["reads"][0]["records"]
    return [rec_row(r["offset"], r["timestamp"], 0 if r["timestamp_type"] == "CreateTime" else 1, _unhex(r["key"]),
                    _unhex(r["value"]), [(k, _unhex(v)) for k, v in r["headers"]]) for r in recs]


def test_c_same_compacted_view_on_both_brokers(both, compare):
    """The Java consumer and confluent-kafka read the same cleaned log from Kafka and from kafkalog: the same
    surviving records at the same offsets (holes included), equal to the model (the latest record per key below the
    active segment, the tombstone that is a key's last word kept: delete.retention.ms is a day), a superset of the
    latest value per key on each broker."""
    b = both
    java = {name: _java_rows(b.observe[name]) for name in ("kafka", "kafkalog")}
    for name in ("kafka", "kafkalog"):
        assert java[name] == b.read[name], _diff_rows(b.read[name], java[name],
                                                      f"{name}: Java consumer vs confluent-kafka")
        assert _latest(b.read[name]) == _latest(b.produced), f"{name}: latest value per key differs from produced"
        offs = [r[0] for r in b.read[name]]
        assert any(y - x > 1 for x, y in zip(offs, offs[1:])), f"{name}: no holes: {offs}"
    compare(java["kafka"], java["kafkalog"], what="Java consumer from the beginning of the compacted topic")
    compare(b.read["kafka"], b.read["kafkalog"], what="confluent-kafka from the beginning of the compacted topic")
    compare({repr(k): v for k, v in _latest(b.read["kafka"]).items()},
            {repr(k): v for k, v in _latest(b.read["kafkalog"]).items()}, what="latest value per key")
    assert b.read["kafkalog"] == b.expected, _diff_rows(b.expected, b.read["kafkalog"], "kafkalog vs the model")
    assert any(r[4] is None for r in b.expected), "no tombstone survived: the workload lost its point"
    print(f"both cleaned {b.waited_s} s after the produce; {len(b.expected)} of {len(b.produced)} records survive")


def test_c_list_offsets_agree_on_compacted_topic(both, compare):
    """Kafka's ListOffsets (Java AdminClient) answers the same on both for earliest, latest, max timestamp and every
    produced record's timestamp (removed records' too) and its neighbours: a target inside a hole lands on the next
    surviving record on both."""
    k = both.observe["kafka"]["offsets"][0]["answers"]
    lg = both.observe["kafkalog"]["offsets"][0]["answers"]
    compare(k, lg, what="ListOffsets on the cleaned compacted topic")
    removed = {r[1] for r in both.produced} - {r[1] for r in both.expected}
    assert any(str(t) in k for t in removed)


def test_c_kafka_dump_log_reads_both_cleaned_logs(both, tmp_path):
    """kafka-dump-log over both brokers' partition dirs (sealed segments): every batch valid, the same data records
    (offset, timestamp, key, value), the same tombstones carrying a KIP-534 delete horizon; kafkalog's sealed
    segments pass --index-sanity-check and --verify-index-only."""
    b = both
    dirs = {"kafka": b.kafka.log_dir / f"{b.topic}-0", "kafkalog": b.kafkalog.log_dir / f"{b.topic}-0"}
    logs = {name: segment_logs(d) for name, d in dirs.items()}
    sealed_idx = [f.with_suffix(s) for f in logs["kafkalog"][:-1] for s in (".index", ".timeindex")]
    deep, sanity, verify = _parallel(
        lambda: dump_log([f for fs in logs.values() for f in fs], "--deep-iteration", "--print-data-log"),
        lambda: dump_log(sealed_idx, "--index-sanity-check"),
        lambda: dump_log(sealed_idx, "--verify-index-only"))
    dump = parse_kafka_dump(deep.stdout)
    views = {}
    for name in dirs:
        batches = _batches(dump, logs[name])
        bad = [x for x in batches if x["isvalid"] != "true"]
        assert not bad, f"{name}: invalid batches {bad[:2]}"
        horizon_tombs = sorted(r["offset"] for x in batches if _horizon(x) is not None for r in x["records"]
                               if r["value"] is None)
        tombs = sorted(r["offset"] for x in batches for r in x["records"] if r["value"] is None)
        views[name] = {"records": _dump_rows(batches), "tombstones": tombs, "with_horizon": horizon_tombs}
    assert views["kafka"] == views["kafkalog"], (views["kafka"], views["kafkalog"])
    assert views["kafka"]["records"] == _shown_rows(b.expected)
    below = [t for t in views["kafka"]["tombstones"] if t < b.sentinel]
    assert below and views["kafka"]["with_horizon"] == below, views["kafka"]
    for f in sealed_idx:
        assert f"{f} passed sanity check." in sanity.stdout or f"{f} is empty." in sanity.stdout, sanity.stdout
    _, problems = _verify_index_report(verify.stderr, dump)
    assert not problems and "Mismatches in" not in verify.stdout, "\n".join(problems[:20])


# ---------------------------------------------------------------------------------------------------------------- (b)

def _kafka_copy(b: Both, root: Path, checkpoint: bool) -> Path:
    """Kafka's partition dir (as it is now, Kafka running: a hot copy; no .deleted leftovers of Kafka's swaps) as a
    kafkalog data dir, with Kafka's cleaner-offset-checkpoint line for it when ``checkpoint``."""
    root.mkdir(parents=True)
    shutil.copytree(b.kafka.log_dir / f"{b.topic}-0", root / f"{b.topic}-0",
                    ignore=shutil.ignore_patterns("*.deleted", "*.cleaned", "*.swap"))
    if checkpoint:
        (root / "cleaner-offset-checkpoint").write_text(f"0\n1\n{b.topic} 0 {b.kafka_checkpoint}\n")
    return root


def _producer_last_batches(part_dir: Path) -> dict[int, dict]:
    """{producer id: {base, last}} of each idempotent producer's last batch, from the batch headers of the .log
    files (v2: BaseOffset int64, Length int32, ..., LastOffsetDelta int32 at byte 23, ProducerId int64 at 43)."""
    out: dict[int, dict] = {}
    for f in segment_logs(part_dir):
        data = f.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            last = base + struct.unpack_from(">i", data, pos + 23)[0]
            pid = struct.unpack_from(">q", data, pos + 43)[0]
            if pid >= 0 and last > out.get(pid, {"last": -1})["last"]:
                out[pid] = {"base": base, "last": last}
            pos += 12 + length
    return out


def _compact_config() -> dict:
    return {k: v for k, v in C_CONFIG.items()}


def test_b_kafkalog_cleans_kafka_cleaned_log(kafka_cleaned, tmp_path):
    """Kafka's cleaned partition (a hot copy and Kafka's cleaner checkpoint) as a kafkalog data dir: read-only it
    reads what a consumer of Kafka read; opened to write, with the topic's compaction keys given, kafkalog's cleaner
    starts where Kafka's stopped (nothing dirty: it does nothing); records superseding Kafka's (a value for Kafka's
    tombstoned key, a tombstone for one of its keys, its active segment's keys, every key of its idempotent
    producers' last batches) are appended, the log rolled, and kafkalog cleans Kafka's segments with its own: the
    latest record per key over both; the producers' last batches kept empty with their sequences (one of them in
    the middle of its cleaned group); kafka-dump-log and Kafka's UnifiedLog read the result as kafkalog does."""
    b = kafka_cleaned
    kafka_rows = b.read["kafka"]
    root = _kafka_copy(b, tmp_path / "data", checkpoint=True)
    pre = _copy_dir(root, tmp_path / "pre")
    with kafkalog.LogStore(root, read_only=True) as st:
        assert_same_rows(kafka_rows, kafkalog_rows(st.log(b.topic, 0)), "kafkalog (read-only) vs Kafka's consumer")
    now = int(time.time() * 1000)
    with _store(root) as st:
        st.alter_topic_config(b.topic, _compact_config())
        log = st.log(b.topic, 0)
        assert log.log_end_offset == kafka_rows[-1][0] + 1
        assert log.run_cleaner(now, force=True) is None, "kafkalog cleaned below Kafka's cleaner checkpoint"
        assert_same_rows(kafka_rows, kafkalog_rows(log), "kafkalog after a no-op round vs Kafka's consumer")
        # every record of Kafka's idempotent producers' last batches is superseded: only the producer's state
        # keeps those batches (empty), as Kafka's cleaner keeps them
        pid_last = _producer_last_batches(root / f"{b.topic}-0")
        assert len(pid_last) == 2, f"Kafka's log holds the batches of {len(pid_last)} idempotent producers"
        superseded = [(r[3], b"superseded-" + r[3]) for r in kafka_rows
                      if any(x["base"] <= r[0] <= x["last"] for x in pid_last.values())]
        new = [[(b"tomb", b"back again"), (b"ck0", b"new-ck0"), (b"s0", b"new-s0"), (b"fresh", b"f1")],
               [(b"ck1", None), (b"ck2", b"new-ck2"), (b"fresh", b"f2"), (b"s1", None)], superseded]
        ours = []
        for batch, codec in zip(new, ("lz4", "zstd", "gzip")):
            base = log.append_batch([v for _, v in batch], keys=[k for k, _ in batch],
                                    timestamps=[now - 60_000] * len(batch), compression=codec)
            ours += [rec_row(base + i, now - 60_000, 0, k, v, []) for i, (k, v) in enumerate(batch)]
        log.roll()
        base = log.append_batch([b"t"], keys=[b"tail"], timestamps=[now - 1000])
        ours.append(rec_row(base, now - 1000, 0, b"tail", b"t", []))
        stats = log.run_cleaner(now, force=True)
        assert stats is not None and stats.first_dirty == b.kafka_checkpoint and stats.end_offset == base, stats
        everything = kafka_rows + ours
        latest = {r[3]: r[0] for r in everything if r[0] < base}
        expected = [r for r in everything if r[0] >= base or latest[r[3]] == r[0]]
        got = kafkalog_rows(log)
    assert_same_rows(expected, got, "kafkalog's cleaning of Kafka's log vs the latest record per key")
    assert any(r[4] is None for r in got if r[0] < base), "the new tombstone must stay (its horizon is a day on)"
    (tmp_path / "loaded").mkdir()
    result = _copy_dir(root / f"{b.topic}-0", tmp_path / "loaded" / f"{b.topic}-0")
    for p in list(result.iterdir()):
        if p.suffix in (".index", ".timeindex") or p.name.startswith(".kafkalog"):
            p.unlink()
    req = tmp_path / "load.json"
    req.write_text(json.dumps([{"dir": str(result), "topic": b.topic, "log_start": 0, "recovery_point": 0,
                                "clean": False, "config": {"cleanup.policy": "compact"}, "timestamps": [-1]}]))
    pre_logs, post_logs = segment_logs(pre / f"{b.topic}-0"), segment_logs(root / f"{b.topic}-0")
    deep, load = _parallel(lambda: dump_log(pre_logs + post_logs, "--deep-iteration", "--print-data-log"),
                           lambda: disklab_json("load", req))
    dump = parse_kafka_dump(deep.stdout)
    post = _batches(dump, post_logs)
    assert all(x["isvalid"] == "true" for x in post), [x for x in post if x["isvalid"] != "true"][:3]
    assert_same_rows(_shown_rows(got), _dump_rows(post), "kafka-dump-log vs kafkalog over the cleaned Kafka log")
    # idempotent producers' last batches (Kafka's) are still there, empty now, sequences and all; one of them is
    # not the last batch of its cleaned group (so nothing but the producer's state keeps it)
    last: dict[str, dict] = {}
    for x in _batches(dump, pre_logs):
        if x["producerId"] != "-1" and int(x["lastOffset"]) > int(last.get(x["producerId"], {"lastOffset": -1})[
                "lastOffset"]):
            last[x["producerId"]] = x
    key = ("baseOffset", "lastOffset", "producerId", "producerEpoch", "baseSequence", "lastSequence")
    post_keys = {tuple(x[k] for k in key): x["count"] for x in post}
    for pid, x in last.items():
        assert post_keys.get(tuple(x[k] for k in key)) == "0", f"producer {pid}'s last batch {x} is not kept empty"
    group_ends = {nxt - 1 for _, nxt, _ in stats.swaps}
    assert any(int(x["lastOffset"]) not in group_ends for x in last.values()), (stats.swaps, last)
    ans = load[0]
    theirs = [rec_row(r["offset"], r["timestamp"], 0, _unhex(r["key"]), _unhex(r["value"]),
                      [(h, _unhex(v)) for h, v in r["headers"]]) for r in ans["records"]]
    assert_same_rows(got, theirs, "Kafka's UnifiedLog over the result vs kafkalog")
    assert ans["log_end"] == base + 1


def test_b_kafkalog_recleans_kafka_segments_without_checkpoint(kafka_cleaned, tmp_path):
    """Without Kafka's checkpoint every segment is dirty: kafkalog's cleaner rewrites Kafka's cleaned segments (and
    seals and cleans Kafka's active one): cleaning a cleaned log changes no record (a consumer of Kafka read the
    same), kafka-dump-log reads the result."""
    b = kafka_cleaned
    kafka_rows = b.read["kafka"]
    root = _kafka_copy(b, tmp_path / "data", checkpoint=False)
    with _store(root) as st:
        st.alter_topic_config(b.topic, _compact_config())
        log = st.log(b.topic, 0)
        log.roll()
        stats = log.run_cleaner(force=True)
        assert stats is not None and stats.first_dirty == 0 and stats.end_offset == kafka_rows[-1][0] + 1, stats
        got = kafkalog_rows(log)
    assert_same_rows(kafka_rows, got, "kafkalog's cleaning of Kafka's cleaned log vs Kafka's records")
    logs = segment_logs(root / f"{b.topic}-0")
    batches = _batches(parse_kafka_dump(dump_log(logs, "--deep-iteration", "--print-data-log").stdout), logs)
    assert all(x["isvalid"] == "true" for x in batches)
    assert_same_rows(_shown_rows(got), _dump_rows(batches), "kafka-dump-log vs kafkalog")


# ================================================================================================================
# (d) small cleaned segments read by librdkafka, kcat and the Java consumer (issue 21): no error events
# ================================================================================================================

# The workload, smaller: 12,000 records of 300 bytes over 400 keys in 64 KiB segments, written by a default
# confluent-kafka producer (batch.size 16 KiB, not idempotent); a sentinel phase two minutes later in record time
# rolls the active segment (segment.ms is one minute). Kafka's cleaner leaves about 60 segments, most of them
# holding no record; a Fetch of such a segment must not answer with headers alone (librdkafka then reports
# MSG_SIZE_TOO_LARGE for every such answer: on kafkalog before issue 21, whose cleaner kept each group's last
# batch empty).
D_CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "60000",
            "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000"}
# Kafka 4.4 refuses segment.bytes below 1 MiB (INVALID_CONFIG) and takes a smaller one as its internal key
D_SEGMENT = {"kafka": {"internal.segment.bytes": "65536"}, "kafkalog": {"segment.bytes": "65536"}}
D_RECORDS, D_KEYS, D_VALUE = 12_000, 400, b"v" * 300


def _d_produce(bootstrap: str, topic: str, t0: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 0,
                  "batch.size": 16384, "linger.ms": 5, "message.timeout.ms": 30000})
    errors: list = []
    for i in range(D_RECORDS):
        p.produce(topic, key=b"k%d" % (i % D_KEYS), value=D_VALUE, partition=0, timestamp=t0 + i // 100,
                  on_delivery=lambda err, msg, out=errors: err is not None and out.append(err))
        if i % 2000 == 1999:
            p.poll(0)
    assert p.flush(30) == 0  # the sentinels in a batch of their own: it rolls the segment (record time)
    for i in range(3):
        p.produce(topic, key=b"sentinel-%d" % i, value=b"s", partition=0, timestamp=t0 + 120_000 + i,
                  on_delivery=lambda err, msg, out=errors: err is not None and out.append(err))
    assert p.flush(30) == 0 and not errors, f"{bootstrap}: {errors[:3]}"


def _d_read_confluent(bootstrap: str, topic: str) -> tuple[list[int], list[str]]:
    """A default confluent-kafka consumer from offset 0 to the high watermark: (offsets, error events)."""
    events: list[str] = []
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": f"d-{uuid.uuid4()}",
                  "enable.auto.commit": False, "log_level": 0, "error_cb": lambda e: events.append(f"cb: {e}")})
    try:
        _, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        offsets: list[int] = []
        for _ in range(600):  # polls of at most 0.5 s each; the whole read takes a few
            for m in c.consume(500, timeout=0.5):
                if m.error() is not None:
                    events.append(str(m.error()))
                else:
                    offsets.append(m.offset())
            if offsets and offsets[-1] >= hi - 1:
                break
        return offsets, events
    finally:
        c.close()


def _d_empty_batches(part_dir: Path) -> int:
    n = 0
    for f in segment_logs(part_dir):
        n += sum(1 for b in iter_batches(f.read_bytes()) if b.record_count == 0)
    return n


@pytest.fixture(scope="module")
def small_segments(both_started, tmp_path_factory) -> dict:
    """(d)'s workload on both brokers, cleaned by each (Kafka's cleaner wakes every 15 s); the model's offsets."""
    b = both_started
    topic = f"cx-small-{uuid.uuid4().hex[:8]}"
    servers = {"kafka": b.kafka, "kafkalog": b.kafkalog}
    for name, srv in servers.items():
        admin = AdminClient({"bootstrap.servers": srv.bootstrap, "broker.address.family": "v4", "log_level": 0})
        admin.create_topics([NewTopic(topic, 1, 1, config=dict(D_CONFIG, **D_SEGMENT[name]))],
                            operation_timeout=20)[topic].result(30)
    t0 = (int(time.time() * 1000) - 30 * 60_000) // 1000 * 1000
    _parallel(lambda: _d_produce(b.kafka.bootstrap, topic, t0), lambda: _d_produce(b.kafkalog.bootstrap, topic, t0))
    latest = {i % D_KEYS: i for i in range(D_RECORDS)}
    want = sorted(latest.values()) + [D_RECORDS, D_RECORDS + 1, D_RECORDS + 2]
    checkpoints = {}
    t = time.monotonic()
    for _ in range(int(WAIT_FOR_CLEANERS_S / 0.5)):  # polls; Kafka's cleaner wakes within 15 s
        checkpoints = {n: _kafka_cleaner_checkpoint(s.log_dir, topic) for n, s in servers.items()}
        if all(c == D_RECORDS for c in checkpoints.values()):
            break
        time.sleep(0.5)
    assert all(c == D_RECORDS for c in checkpoints.values()), \
        f"the cleaners did not reach the active segment at {D_RECORDS}: {checkpoints}"
    _timed("d: produce + both cleaners", t)
    return {"topic": topic, "servers": servers, "want": want}


@pytest.mark.parametrize("broker", ["kafka", "kafkalog"])
def test_d_small_cleaned_segments_read_without_error_events(small_segments, broker, tmp_path):
    """confluent-kafka (default consumer), kcat and the Java consumer read the cleaned topic from offset 0 to its
    end: exactly the latest record per key and the sentinels, and not one error event (MSG_SIZE_TOO_LARGE was
    reported 94 times per read by librdkafka on kafkalog before issue 21). Neither broker keeps an empty batch: the
    producer was not idempotent, so Kafka keeps none, and kafkalog keeps what Kafka keeps."""
    d = small_segments
    srv = d["servers"][broker]
    topic, want = d["topic"], d["want"]
    part_dir = srv.log_dir / f"{topic}-0"
    logs = segment_logs(part_dir)
    without_records = sum(1 for f in logs if not any(b.record_count for b in iter_batches(f.read_bytes())))
    print(f"{broker}: {len(logs)} segments, {without_records} of them without a record")
    # the read crosses cleaned segments; how many of them were left without a record is the cleaners' timing (both
    # merge emptied segments when a later round finds them: Kafka left 56 on a quiet machine, 8 on a loaded one, 1
    # on a CI run beside the other tests), so it is reported, not asserted
    assert len(logs) >= 2, f"{broker}: the cleaned log is one segment: the read crosses none"
    offsets, events = _d_read_confluent(srv.bootstrap, topic)
    assert not events, f"{broker}: librdkafka reported {len(events)} error events, e.g. {events[:3]}"
    assert offsets == want, f"{broker}: confluent-kafka read {len(offsets)} records, {len(want)} expected"
    assert _d_empty_batches(part_dir) == 0, f"{broker} kept empty batches of a producer without an id"
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is not installed (Debian: apt-get install kcat)"
    r = subprocess.run([kcat, "-b", srv.bootstrap, "-X", "broker.address.family=v4", "-C", "-t", topic, "-p", "0",
                        "-o", "beginning", "-e", "-q", "-f", "%o\\n"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), f"{broker}: kcat exit {r.returncode}: {r.stderr[-2000:]}"
    assert [int(x) for x in r.stdout.split()] == want
    req = tmp_path / "observe.json"
    req.write_text(json.dumps({"reads": [{"topic": topic}], "commits": [], "offsets": []}))
    java = disklab_json("observe", srv.bootstrap, req)["reads"][0]
    assert [x["offset"] for x in java["records"]] == want and java["position"] == java["end"] == D_RECORDS + 3
