"""kafkalog's on-disk format against Apache Kafka 4.4.0, in both directions.

(a) Kafka reads ours. kafkalog (the embedded LogStore) writes segments: every codec, binary records, staged appends
into a topic with its own compression.type, a LogAppendTime topic, a log after delete_records_before and one after
retention, all with small segment.bytes / index.interval.bytes so that segments roll and indexes have entries. Then
Kafka's own code reads them: ``kafka-dump-log --deep-iteration --print-data-log`` (every record, every batch's codec
and CRC verdict), ``--index-sanity-check`` and ``--verify-index-only`` on every .index/.timeindex, and through
tests/compat/java/disk/DiskLab.java: Kafka's FileRecords (exact bytes, header values), Kafka's LogSegment over our
index files (translateOffset, findOffsetByTimestamp composed as UnifiedLog composes it, against kafkalog's
offset_for_time), Kafka's UnifiedLog loading our partition dirs with their indexes deleted (recovery must cut
nothing, the indexes it rebuilds must be byte for byte ours, reads and fetchOffsetByTimestamp must agree) and Kafka's
OffsetCheckpointFile over our checkpoint files.

(b) We read Kafka's. A module-scoped Kafka 4.4.0 broker of our own (stopped for a consistent copy): a topic per codec
(Java producer, then librdkafka), a LogAppendTime topic, a compacted topic Kafka's cleaner has holed (confirmed with
kafka-dump-log), idempotent producers, a transactional producer (commits and aborts: control batches), a topic after
Kafka's DeleteRecords, and committed group offsets. What a Java consumer reads (read_uncommitted; read_committed for
the transactional topic) and Kafka's ListOffsets answers (earliest, latest, max timestamp, by timestamp) are
recorded; the broker is stopped, its log dir copied, and kafkalog opens the copy read-only: ``kafkalog check``,
``kafkalog dump`` (against kafka-dump-log and the consumer), ``kafkalog groups``, ``LogStore(path,
read_only=True)``'s records() / read_columns() / offset_for_time() against the consumer and ListOffsets, holes
included; a copy taken while Kafka ran (preallocated indexes, no clean-shutdown marker) too.

Run: ``pytest tests/compat/test_disk_format.py`` (about a minute on 2 cores: one Kafka start, ~25 short JVMs and
kafkalog CLI processes).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

import kafkalog

from .lab import KafkaBroker, LabError, kafka_tool, run_java_source

LAB_TEST_DEADLINE_S = 120
DISKLAB = Path(__file__).resolve().parent / "java" / "disk" / "DiskLab.java"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TS_TYPES = {"CreateTime": 0, "LogAppendTime": 1}
TIMINGS: dict[str, float] = {}


# ------------------------------------------------------------------------------------------------ running things

def _ok(r: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    assert r.returncode == 0, (f"{what} exited {r.returncode}\n--- stdout ---\n{r.stdout[-4000:]}\n"
                               f"--- stderr ---\n{r.stderr[-6000:]}")
    return r


def disklab(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    """Kafka's own classes over our files or against the broker (tests/compat/java/disk/DiskLab.java)."""
    return _ok(run_java_source(DISKLAB, [str(a) for a in args], timeout=timeout), f"DiskLab {args[0]}")


def disklab_json(*args, timeout: float = 120):
    out = disklab(*args, timeout=timeout).stdout.strip().splitlines()
    return json.loads(out[-1])


def dump_log(files, *flags, timeout: float = 120) -> subprocess.CompletedProcess:
    """kafka-dump-log over many files in one JVM (``--files a,b,c``)."""
    files = [str(f) for f in files]
    assert files, "no files to dump"
    return _ok(kafka_tool("kafka-dump-log", [*flags, "--files", ",".join(files)], timeout=timeout),
               f"kafka-dump-log {' '.join(flags)}")


def _cli_env() -> dict:
    env = dict(os.environ)
    root = str(Path(kafkalog.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONSAFEPATH"] = "1"
    return env


def kafkalog_cli(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalog", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=_cli_env(), stdin=subprocess.DEVNULL)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under root: relative path -> size and sha256 (to prove a reader wrote nothing)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = f"{p.stat().st_size}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
    return out


def segment_logs(part_dir: Path) -> list[Path]:
    """The .log files of a partition dir in offset order (not .deleted/.cleaned/.swap leftovers)."""
    return sorted(p for p in part_dir.iterdir() if re.fullmatch(r"\d{20}\.log", p.name))


def _timed(name: str, t0: float) -> None:
    TIMINGS[name] = round(time.monotonic() - t0, 2)


# ------------------------------------------------------------------------------------------------ parsing dumps

_KAFKA_REC = re.compile(r"^\| offset: (\d+) (CreateTime|LogAppendTime|NoTimestampType): (-?\d+) keySize: (-?\d+) "
                        r"valueSize: (-?\d+)(?: sequence: (-?\d+) headerKeys: \[([^\]]*)\])?")
_KL_REC = re.compile(r"^\| offset: (\d+) (CreateTime|LogAppendTime): (-?\d+) keySize: (-?\d+) valueSize: (-?\d+) "
                     r"headerKeys: \[(.*?)\] key: (.*?) payload: (.*)$")
_FIELD = re.compile(r"(\w+): (\S+)")


def _batch_fields(line: str) -> dict:
    fields = dict(_FIELD.findall(line))
    for ttype in TS_TYPES:
        if ttype in fields:
            fields["timestamp_type"], fields["max_timestamp"] = ttype, fields.pop(ttype)
    return fields


def parse_kafka_dump(text: str) -> dict[str, dict]:
    """kafka-dump-log's stdout: {file as given: {"batches": [batch fields + "records"], "trailing": text|None}}."""
    files: dict[str, dict] = {}
    cur = batch = None
    for line in text.split("\n"):
        if line.startswith("Dumping "):
            cur = files.setdefault(line[len("Dumping "):], {"batches": [], "trailing": None, "lines": []})
            batch = None
            continue
        if cur is None:
            continue
        cur["lines"].append(line)
        if line.startswith("baseOffset: "):
            batch = _batch_fields(line)
            batch["records"] = []
            cur["batches"].append(batch)
        elif line.startswith("| offset: "):
            m = _KAFKA_REC.match(line)
            assert m, f"unparsed kafka-dump-log record line: {line!r}"
            rec = {"offset": int(m[1]), "timestamp_type": m[2], "timestamp": int(m[3]), "key_size": int(m[4]),
                   "value_size": int(m[5]), "sequence": int(m[6]) if m[6] is not None else None,
                   "header_keys": [h for h in (m[7] or "").split(",") if h], "key": None, "value": None}
            rest = line[m.end():]
            if rest.startswith(" endTxnMarker: "):
                rec["marker"] = rest.split()[1]
            else:
                km = re.fullmatch(r"(?: key: (.*?))?(?: payload: (.*))?", rest)
                assert km, f"unparsed key/payload in kafka-dump-log line {line!r}"
                rec["key"], rec["value"] = km[1], km[2]
            batch["records"].append(rec)
        elif line.startswith("Found ") and "invalid bytes" in line:
            cur["trailing"] = line
    return files


def parse_kafkalog_dump(text: str) -> dict[str, list[dict]]:
    """`kafkalog dump DIR --deep` stdout: {file as printed: batches with their records} (.log files only)."""
    files: dict[str, list[dict]] = {}
    batches: list[dict] = []
    for line in text.split("\n"):
        if line.startswith("Dumping "):
            batches = files.setdefault(line[len("Dumping "):], [])
        elif line.startswith("baseOffset: "):
            b = _batch_fields(line)
            b["records"] = []
            batches.append(b)
        elif line.startswith("| offset: "):
            m = _KL_REC.match(line)
            assert m, f"unparsed `kafkalog dump` record line: {line!r}"
            batches[-1]["records"].append({
                "offset": int(m[1]), "timestamp_type": m[2], "timestamp": int(m[3]), "key_size": int(m[4]),
                "value_size": int(m[5]), "headers": m[6], "key": m[7], "value": m[8]})
    return files


def _shown(v: str | None) -> str | None:
    """Printed key/payload text compared where it is printable ASCII (tools decode invalid UTF-8 their own way)."""
    return v if v is None or v.isascii() and v.isprintable() else "<binary>"


def non_consecutive(stderr: str) -> dict[str, list[tuple[int, int]]]:
    """kafka-dump-log's "Non-consecutive offsets in FILE / A is followed by B" report (stderr)."""
    out: dict[str, list[tuple[int, int]]] = {}
    cur = None
    for line in stderr.split("\n"):
        if line.startswith("Non-consecutive offsets in "):
            cur = out.setdefault(line[len("Non-consecutive offsets in "):], [])
        elif cur is not None and (m := re.fullmatch(r"\s+(-?\d+) is followed by (-?\d+)", line)):
            cur.append((int(m[1]), int(m[2])))
        else:
            cur = None
    return out


def _printable(b: bytes | None) -> bool:
    return b is not None and all(32 <= c < 127 for c in b)


def _text(b: bytes | None):
    """What a dump prints for key/payload, when the bytes are printable ASCII; else a marker compared as such."""
    if b is None:
        return None
    return b.decode() if _printable(b) else "<binary>"


# ------------------------------------------------------------------------------------------------ records as rows

def rec_row(offset, timestamp, ts_type, key, value, headers) -> tuple:
    return (int(offset), int(timestamp), int(ts_type), None if key is None else bytes(key),
            None if value is None else bytes(value), tuple((k, None if v is None else bytes(v)) for k, v in headers))


def kafkalog_rows(log) -> list[tuple]:
    return [rec_row(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in log.records()]


def _binary_column(cols, name, i):
    valid = cols[f"{name}_valid"]
    if not valid[i]:
        return None
    offs = cols[f"{name}_offsets"]
    return bytes(cols[f"{name}s"][offs[i]:offs[i + 1]])


def column_rows(cols: dict) -> list[tuple]:
    """read_columns()'s Arrow-layout columns back into rows."""
    rows = []
    hoffs, hk_offs, hv_offs = cols["header_offsets"], cols["header_key_offsets"], cols["header_value_offsets"]
    for i in range(len(cols["offset"])):
        headers = []
        for h in range(hoffs[i], hoffs[i + 1]):
            k = bytes(cols["header_keys"][hk_offs[h]:hk_offs[h + 1]]).decode()
            v = bytes(cols["header_values"][hv_offs[h]:hv_offs[h + 1]]) if cols["header_value_valid"][h] else None
            headers.append((k, v))
        rows.append(rec_row(cols["offset"][i], cols["timestamp"][i], cols["timestamp_type"][i],
                            _binary_column(cols, "key", i), _binary_column(cols, "value", i), headers))
    return rows


def consumer_rows(records: list[dict]) -> list[tuple]:
    """DiskLab observe's consumer records (hex) as rows."""
    def unhex(x):
        return None if x is None else bytes.fromhex(x)
    return [rec_row(r["offset"], r["timestamp"], TS_TYPES[r["timestamp_type"]], unhex(r["key"]), unhex(r["value"]),
                    [(k, unhex(v)) for k, v in r["headers"]]) for r in records]


def _diff_rows(expected: list[tuple], got: list[tuple], what: str, limit: int = 12) -> str:
    exp = {r[0]: r for r in expected}
    have = {r[0]: r for r in got}
    lines = []
    for off in sorted(set(exp) | set(have)):
        if exp.get(off) != have.get(off):
            lines.append(f"  offset {off}: expected {exp.get(off)!r:.160}\n  {' ' * len(str(off))}        got "
                         f"{have.get(off)!r:.160}")
    order = "" if [r[0] for r in got] == sorted(have) else "  (got offsets out of order)\n"
    return (f"{what}: {len(lines)} differing offsets (expected {len(expected)} records, got {len(got)})\n{order}"
            + "\n".join(lines[:limit]) + ("\n  ..." if len(lines) > limit else ""))


def assert_rows(expected: list[tuple], got: list[tuple], what: str) -> None:
    assert got == expected, _diff_rows(expected, got, what)


# ================================================================================================================
# (a) Kafka reads ours
# ================================================================================================================

A_TOPICS = {
    # every codec, printable records, non-monotonic timestamps; small segments so they roll, dense indexes
    "codecs": {"segment.bytes": 16384, "index.interval.bytes": 1024},
    # random binary keys/values (big batches: several LZ4 blocks), verified byte for byte through Kafka's FileRecords
    "binary": {"segment.bytes": 2 << 20, "index.interval.bytes": 4096},
    # append() staged by an exclusive store, and append_batch recompressed: the topic's codec wins
    "staged-zstd": {"compression.type": "zstd", "segment.bytes": 4096, "index.interval.bytes": 512},
    "logappend": {"message.timestamp.type": "LogAppendTime", "segment.bytes": 8192, "index.interval.bytes": 256},
    "deleted": {"segment.bytes": 5000, "index.interval.bytes": 512},
    "retained": {"segment.bytes": 5000, "index.interval.bytes": 512, "retention.ms": 3_600_000,
                 "file.delete.delay.ms": 0},
}


def _a_records(rng: random.Random, n: int, tag: str, t0: int, binary: bool = False) -> list[dict]:
    out = []
    for i in range(n):
        if i % 11 == 3:
            key = None
        elif i % 19 == 7:
            key = b""
        else:
            key = rng.randbytes(rng.randint(1, 40)) if binary else f"{tag}-k{i % 17}".encode()
        if i % 13 == 5:
            value = None
        elif binary:
            value = rng.randbytes(rng.randint(0, 3000)) if i % 2 else bytes(rng.randint(0, 3)) * rng.randint(0, 4000)
        else:
            value = (f"{tag}-v{i}-" + "abcdefghij"[i % 10] * rng.randint(0, 300)).encode()
        headers = [] if i % 3 == 0 else [(f"h-{i % 5}", f"hv{i}".encode()), ("null-h", None), ("e", b"")][: i % 4]
        ts = t0 + i * 7 - (30 if i % 5 == 2 else 0)  # dips: timestamps out of order inside and across batches
        out.append({"key": key, "value": value, "headers": headers, "ts": ts})
    return out


class Ours:
    """What (a) wrote: expected rows per topic (LogAppendTime rows carry timestamp -1: checked apart), the codec of
    each record's batch, the windows of LogAppendTime appends, log starts and ends."""

    def __init__(self, root: Path):
        self.root = root
        self.expected: dict[str, dict[int, tuple]] = {t: {} for t in A_TOPICS}
        self.codec: dict[str, dict[int, str]] = {t: {} for t in A_TOPICS}
        self.append_windows: list[tuple[int, int, int, int]] = []  # (first offset, last offset, lo ms, hi ms)
        self.log_start: dict[str, int] = {}
        self.log_end: dict[str, int] = {}

    def part_dir(self, topic: str) -> Path:
        return self.root / f"{topic}-0"

    def logs(self, topic: str) -> list[Path]:
        return segment_logs(self.part_dir(topic))

    def rows(self, topic: str, start: int = 0) -> list[tuple]:
        return [r for off, r in sorted(self.expected[topic].items()) if off >= start]


def _append(ours: Ours, log, topic: str, recs: list[dict], codec: str, stored_codec: str | None = None) -> None:
    base = log.append_batch([r["value"] for r in recs], keys=[r["key"] for r in recs],
                            timestamps=[r["ts"] for r in recs], headers=[r["headers"] for r in recs],
                            compression=codec)
    for i, r in enumerate(recs):
        ours.expected[topic][base + i] = rec_row(base + i, r["ts"], 0, r["key"], r["value"], r["headers"])
        ours.codec[topic][base + i] = stored_codec or codec


@pytest.fixture(scope="module")
def ours_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("diskfmt-ours")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def ours(ours_root) -> Ours:
    t_start = time.monotonic()
    root = ours_root / "data"
    ours = Ours(root)
    rng = random.Random(20261126)
    now = int(time.time() * 1000)
    t0 = now - 86_400_000  # a day ago: inside every timestamp bound, outside nothing's retention but "retained"'s
    with kafkalog.LogStore(root, exclusive=True, maintenance=False) as store:
        for topic, config in A_TOPICS.items():
            store.create_topic(topic, 1, config=config)

        log = store.log("codecs", 0)
        recs = _a_records(rng, 900, "codecs", t0)
        i = 0
        while i < len(recs):
            for codec in CODECS:
                n = rng.randint(1, 40)
                if recs[i:i + n]:
                    _append(ours, log, "codecs", recs[i:i + n], codec)
                i += n

        log = store.log("binary", 0)
        recs = _a_records(rng, 5 * 170, "binary", t0, binary=True)
        for j, codec in enumerate(CODECS):
            chunk = recs[j * 170:(j + 1) * 170]
            _append(ours, log, "binary", chunk[:150], codec)      # ~200 KB raw: several 64 KiB LZ4 blocks
            _append(ours, log, "binary", chunk[150:151], codec)   # one record
            _append(ours, log, "binary", chunk[151:], codec)

        log = store.log("staged-zstd", 0)
        recs = _a_records(rng, 400, "staged", t0)
        for j, r in enumerate(recs[:300]):
            off = log.append(r["value"], key=r["key"], timestamp=r["ts"], headers=r["headers"])
            ours.expected["staged-zstd"][off] = rec_row(off, r["ts"], 0, r["key"], r["value"], r["headers"])
            ours.codec["staged-zstd"][off] = "zstd"
            if j == 150:
                log.flush()  # a staged batch written in the middle
        for j in range(300, 400, 25):
            _append(ours, log, "staged-zstd", recs[j:j + 25], "gzip", stored_codec="zstd")

        log = store.log("logappend", 0)
        recs = _a_records(rng, 200, "lat", t0)
        for j in range(0, 200, 20):
            lo = int(time.time() * 1000)
            base = log.append_batch([r["value"] for r in recs[j:j + 20]], keys=[r["key"] for r in recs[j:j + 20]],
                                    timestamps=[r["ts"] for r in recs[j:j + 20]],
                                    headers=[r["headers"] for r in recs[j:j + 20]], compression=CODECS[j // 20 % 5])
            hi = int(time.time() * 1000)
            ours.append_windows.append((base, base + 19, lo, hi))
            for k, r in enumerate(recs[j:j + 20]):
                ours.expected["logappend"][base + k] = rec_row(base + k, -1, 1, r["key"], r["value"], r["headers"])
                ours.codec["logappend"][base + k] = CODECS[j // 20 % 5]
            time.sleep(0.003)

        log = store.log("deleted", 0)
        recs = _a_records(rng, 600, "del", t0)
        for j in range(0, 600, 10):
            _append(ours, log, "deleted", recs[j:j + 10], CODECS[j // 10 % 5])
        bases = [s.base_offset for s in log.segments()]
        assert len(bases) >= 6, f"'deleted' rolled only {len(bases)} segments"
        target = bases[3] + 4  # mid-segment: segments 0-2 go, segment 3 stays with records below the log start
        assert log.delete_records_before(target) == target
        ours.log_start["deleted"] = target

        log = store.log("retained", 0)
        old = _a_records(rng, 300, "ret-old", now - 3 * 3_600_000)
        new = _a_records(rng, 200, "ret-new", now - 60_000)
        for j in range(0, 300, 10):
            _append(ours, log, "retained", old[j:j + 10], CODECS[j // 10 % 5])
        log.roll()
        first_new = log.log_end_offset
        for j in range(0, 200, 10):
            _append(ours, log, "retained", new[j:j + 10], CODECS[j // 10 % 5])
        removed = log.run_retention(now)
        log.purge_deleted(force=True)
        assert removed > 0 and log.log_start_offset == first_new, \
            f"retention removed {removed} segments, log start {log.log_start_offset} (expected {first_new})"
        ours.log_start["retained"] = first_new

        for topic in A_TOPICS:
            lg = store.log(topic, 0)
            lg.flush()
            ours.log_start.setdefault(topic, 0)
            ours.log_end[topic] = lg.log_end_offset
    # the store is closed cleanly: indexes trimmed, checkpoints and the clean-shutdown marker written
    for topic in A_TOPICS:
        leftovers = [p.name for p in ours.part_dir(topic).iterdir() if p.name.endswith(".deleted")]
        assert not leftovers, f"{topic}: files left after retention/delete: {leftovers}"
    _timed("a: kafkalog writes", t_start)
    return ours


@pytest.fixture(scope="module")
def ours_by_kafka(ours, ours_root) -> dict:
    """Kafka's tools over our files, each run once for the module (one JVM per tool)."""
    t_start = time.monotonic()
    logs = [p for t in A_TOPICS for p in ours.logs(t)]
    indexes = [p.with_suffix(s) for p in logs for s in (".index", ".timeindex")]
    deep = dump_log(logs, "--deep-iteration", "--print-data-log")
    sanity = dump_log(indexes, "--index-sanity-check")
    verify = dump_log(indexes, "--verify-index-only")
    plain_index = dump_log([p for p in indexes if p.suffix == ".index"])
    by_file: dict[str, list[dict]] = {str(p): [] for p in logs}
    for line in disklab("records", *logs).stdout.split("\n"):
        if line.startswith("{"):
            b = json.loads(line)
            assert "trailing_bytes" not in b, f"Kafka's FileRecords found bytes after the last batch: {b}"
            by_file[b["file"]].append(b)
    # Kafka's checkpoint reader opens the files it reads: give it copies
    ck_dir = ours_root / "checkpoints"
    ck_dir.mkdir()
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        shutil.copy(ours.root / name, ck_dir / name)
    checkpoints = disklab_json("checkpoint", ck_dir / "recovery-point-offset-checkpoint",
                               ck_dir / "log-start-offset-checkpoint")
    _timed("a: Kafka's tools over our files", t_start)
    return {"deep": deep, "sanity": sanity, "verify": verify, "plain_index": plain_index,
            "dump": parse_kafka_dump(deep.stdout), "records": by_file, "checkpoints": checkpoints,
            "ck_dir": ck_dir}


def test_kafka_dump_log_reads_every_record_we_wrote(ours, ours_by_kafka):
    dump = ours_by_kafka["dump"]
    problems = []
    for topic in A_TOPICS:
        files = ours.logs(topic)
        got, batches = [], []
        for f in files:
            entry = dump.get(str(f))
            assert entry is not None, f"kafka-dump-log did not dump {f}:\n{ours_by_kafka['deep'].stdout[-2000:]}"
            assert entry["trailing"] is None, f"{f}: {entry['trailing']}"
            for b in entry["batches"]:
                batches.append(b)
                if b["isvalid"] != "true" or b["magic"] != "2":
                    problems.append(f"{f}: batch at {b['position']}: isvalid {b['isvalid']} magic {b['magic']}")
                for r in b["records"]:
                    ts = r["timestamp"] if topic != "logappend" else -1
                    got.append((r["offset"], ts, TS_TYPES[r["timestamp_type"]], r["key_size"], r["value_size"],
                                tuple(r["header_keys"]), r["key"] if topic != "binary" else "<skip>",
                                r["value"] if topic != "binary" else "<skip>", b["compresscodec"]))
        first = int(files[0].name[:20])
        expected = []
        for row in ours.rows(topic, first):
            off, ts, tstype, key, value, headers = row
            expected.append((off, ts, tstype, -1 if key is None else len(key), -1 if value is None else len(value),
                             tuple(k for k, _ in headers), _text(key) if topic != "binary" else "<skip>",
                             _text(value) if topic != "binary" else "<skip>", ours.codec[topic][off]))
        if got != expected:
            problems.append(_diff_rows(expected, got, f"{topic}: kafka-dump-log vs what kafkalog wrote"))
        if topic == "logappend":
            for b in batches:
                if b["timestamp_type"] != "LogAppendTime" or any(
                        r["timestamp"] != int(b["max_timestamp"]) or r["timestamp_type"] != "LogAppendTime"
                        for r in b["records"]):
                    problems.append(f"logappend: batch {b['baseOffset']}: records do not carry the batch's "
                                    f"LogAppendTime {b['max_timestamp']}: {b['records'][:2]}")
            for first_off, last_off, lo, hi in ours.append_windows:
                b = next(b for b in batches if int(b["baseOffset"]) == first_off)
                if not (lo <= int(b["max_timestamp"]) <= hi) or int(b["lastOffset"]) != last_off:
                    problems.append(f"logappend: batch {first_off}..{last_off} LogAppendTime {b['max_timestamp']} "
                                    f"outside the append call's wall clock [{lo}, {hi}]")
    # a file that does not start at offset 0 is reported as "-1 is followed by <base>"; nothing else may be
    gaps = {f: [p for p in pairs if p[0] != -1] for f, pairs in non_consecutive(ours_by_kafka["deep"].stderr).items()}
    problems += [f"{f}: non-consecutive offsets {pairs}" for f, pairs in gaps.items() if pairs]
    assert not problems, "\n".join(problems)


def test_kafka_record_reader_sees_our_exact_bytes(ours, ours_by_kafka):
    """Kafka's FileRecords/DefaultRecordBatch: ensureValid on every batch, every key, value and header value."""
    problems = []
    for topic in A_TOPICS:
        files = ours.logs(topic)
        got = []
        for f in files:
            for b in ours_by_kafka["records"][str(f)]:
                wrote = ours.codec[topic][b["base_offset"]]
                if b["valid"] != "ok" or b["magic"] != 2 or b["control"] or b["codec"] != wrote:
                    problems.append(f"{f}: batch {b['base_offset']}: valid={b['valid']} magic={b['magic']} "
                                    f"control={b['control']} codec={b['codec']} "
                                    f"(wrote {wrote})")
                want_type = "LogAppendTime" if topic == "logappend" else "CreateTime"
                if b["timestamp_type"] != want_type:
                    problems.append(f"{f}: batch {b['base_offset']}: timestamp type {b['timestamp_type']}")
                if b["count"] != len(b["records"]) or b["last_offset"] != b["base_offset"] + len(b["records"]) - 1:
                    problems.append(f"{f}: batch {b['base_offset']}: count {b['count']} last {b['last_offset']} for "
                                    f"{len(b['records'])} records")
                real_max = max(r["timestamp"] for r in b["records"])
                if b["max_timestamp"] != real_max:
                    problems.append(f"{f}: batch {b['base_offset']}: header MaxTimestamp {b['max_timestamp']}, "
                                    f"records' largest {real_max}")
                for r in b["records"]:
                    got.append(rec_row(r["offset"], r["timestamp"] if topic != "logappend" else -1,
                                       1 if topic == "logappend" else 0,
                                       None if r["key"] is None else bytes.fromhex(r["key"]),
                                       None if r["value"] is None else bytes.fromhex(r["value"]),
                                       [(k, None if v is None else bytes.fromhex(v)) for k, v in r["headers"]]))
        want = ours.rows(topic, int(files[0].name[:20]))
        if got != want:
            problems.append(_diff_rows(want, got, f"{topic}: Kafka's FileRecords vs what kafkalog wrote"))
    assert not problems, "\n".join(problems)


def test_kafka_index_checks_pass_on_our_indexes(ours, ours_by_kafka):
    sanity, verify = ours_by_kafka["sanity"], ours_by_kafka["verify"]
    problems = []
    nonempty = 0
    for topic in A_TOPICS:
        for log in ours.logs(topic):
            for suffix in (".index", ".timeindex"):
                f = log.with_suffix(suffix)
                passed = f"{f} passed sanity check."
                empty = f"{f} is empty."
                if passed in sanity.stdout:
                    nonempty += suffix == ".index"
                elif not (suffix == ".index" and empty in sanity.stdout):
                    problems.append(f"{f}: neither '{passed}' nor (offset index) '{empty}' in --index-sanity-check")
                size = f.stat().st_size
                if size % (8 if suffix == ".index" else 12):
                    problems.append(f"{f}: {size} bytes: not whole entries (not trimmed?)")
    for phrase in ("Mismatches in", "Found timestamp mismatch", "Found out of order timestamp",
                   "indexed offsets are not found", "Exception", "corrupt"):
        if phrase in verify.stderr or phrase in sanity.stderr:
            problems.append(f"'{phrase}' reported:\n--- verify stderr ---\n{verify.stderr[-4000:]}\n"
                            f"--- sanity stderr ---\n{sanity.stderr[-2000:]}")
    # the checks are not vacuous: most segments carry offset index entries (index.interval.bytes is small)
    segments = sum(len(ours.logs(t)) for t in A_TOPICS)
    entries = sum(1 for line in ours_by_kafka["plain_index"].stdout.splitlines() if line.startswith("offset: "))
    assert nonempty >= segments // 2 and entries >= 50, (nonempty, segments, entries)
    assert not problems, "\n".join(problems)


def _targets(ours: Ours, ours_by_kafka: dict, topic: str) -> list[int]:
    """Timestamps to search for: 0, a sample of the records' timestamps and their neighbours, past the last."""
    batches = [b for f in ours.logs(topic) for b in ours_by_kafka["records"][str(f)]]
    ts_all = sorted({r["timestamp"] for b in batches for r in b["records"]})
    pick = ts_all[:: max(1, len(ts_all) // 40)] + ts_all[-3:]
    return sorted({0, *pick, *(t - 1 for t in pick), *(t + 1 for t in pick), ts_all[-1] + 1})


def test_kafka_log_segment_lookups_on_our_indexes(ours, ours_by_kafka, tmp_path):
    """Kafka's LogSegment (its OffsetIndex, TimeIndex and FileRecords) over copies of our segments: translateOffset
    lands on the batch holding each offset; findOffsetByTimestamp per segment, composed as UnifiedLog composes it
    (the first segment whose largest timestamp >= target, searched from the log start offset), equals kafkalog's
    offset_for_time over the same files."""
    requests, targets = [], {}
    for topic in A_TOPICS:
        src = ours.part_dir(topic)
        dst = tmp_path / src.name
        shutil.copytree(src, dst)  # Kafka maps index files read-write: never ours
        rows = ours.rows(topic, int(ours.logs(topic)[0].name[:20]))
        targets[topic] = _targets(ours, ours_by_kafka, topic)
        for f in ours.logs(topic):
            base = int(f.name[:20])
            seg_batches = ours_by_kafka["records"][str(f)]
            offsets = [r[0] for r in rows if seg_batches and seg_batches[0]["base_offset"] <= r[0]
                       <= seg_batches[-1]["last_offset"]]
            nxt = seg_batches[-1]["last_offset"] + 1 if seg_batches else base
            requests.append({"dir": str(dst), "base": base, "topic": topic, "offsets": offsets + [nxt],
                             "timestamps": targets[topic], "starting_offset": ours.log_start[topic]})
    req = tmp_path / "segments.json"
    req.write_text(json.dumps(requests))
    answers = disklab_json("segments", req)
    problems = []
    by_topic: dict[str, list[dict]] = {}
    for rq, ans in zip(requests, answers):
        by_topic.setdefault(rq["topic"], []).append(ans)
        if ans["sanity"] != "ok":
            problems.append(f"{rq['dir']}/{rq['base']:020d}: Kafka's sanityCheck: {ans['sanity']}")
        seg_batches = ours_by_kafka["records"][str(ours.part_dir(rq["topic"]) / f"{rq['base']:020d}.log")]
        for o in rq["offsets"]:
            holder = next((b for b in seg_batches if b["base_offset"] <= o <= b["last_offset"]), None)
            got = ans["translate"][str(o)]
            if (holder is None) != (got is None) or (holder and got[1] != holder["position"]):
                problems.append(f"{rq['topic']} segment {rq['base']}: translateOffset({o}) -> {got}, the batch "
                                f"holding it starts at {holder and holder['position']}")
        if seg_batches:
            seg_max = max(b["max_timestamp"] for b in seg_batches)
            if ans["max_timestamp"] != seg_max:
                problems.append(f"{rq['topic']} segment {rq['base']}: the time index's last entry says max "
                                f"timestamp {ans['max_timestamp']}, the batches {seg_max}")
    with kafkalog.LogStore(ours.root, read_only=True) as store:
        for topic, segs in by_topic.items():
            log = store.log(topic, 0)
            for t in targets[topic]:
                seg = next((s for s in segs if s["max_timestamp"] >= t), None)
                kafka_says = seg["by_timestamp"][str(t)] if seg is not None else None
                found = log.offset_for_time(t)
                ours_says = None if found is None else [found.timestamp, found.offset]
                if kafka_says != ours_says:
                    problems.append(f"{topic}: timestamp {t}: Kafka's LogSegment search (timestamp, offset) "
                                    f"{kafka_says}, kafkalog offset_for_time {ours_says}")
    assert not problems, "\n".join(problems[:30])


def test_kafka_unified_log_loads_our_partitions(ours, ours_by_kafka, tmp_path):
    """Kafka's UnifiedLog (LogLoader) over copies of our partition dirs with every index file deleted, as after an
    unclean shutdown with recovery point 0: Kafka validates every batch (nothing may be truncated), rebuilds both
    indexes of every segment (they must be byte for byte ours: the same entries at the same positions), starts at
    our checkpointed log start, then reads every record and answers fetchOffsetByTimestamp as kafkalog does."""
    requests, before = [], {}
    for topic, config in A_TOPICS.items():
        dst = tmp_path / f"{topic}-0"
        shutil.copytree(ours.part_dir(topic), dst)
        for p in dst.iterdir():
            if p.suffix in (".index", ".timeindex"):
                before[str(p)] = p.read_bytes()
                p.unlink()
            elif p.suffix == ".log":
                before[str(p)] = p.read_bytes()
        kafka_config = {"index.interval.bytes": str(config["index.interval.bytes"])}
        if "message.timestamp.type" in config:
            kafka_config["message.timestamp.type"] = config["message.timestamp.type"]
        requests.append({"dir": str(dst), "topic": topic, "config": kafka_config, "log_start": ours.log_start[topic],
                         "recovery_point": 0, "clean": False,
                         "timestamps": [-2, -1, -3, *_targets(ours, ours_by_kafka, topic)]})
    req = tmp_path / "load.json"
    req.write_text(json.dumps(requests))
    answers = disklab_json("load", req)
    problems = []
    for path, data in before.items():
        now = Path(path).read_bytes() if Path(path).exists() else None
        if path.endswith(".log"):
            if now != data:
                problems.append(f"{path}: Kafka's recovery changed the .log ({len(data)} -> "
                                f"{None if now is None else len(now)} bytes)")
        elif now is None or now[:len(data)] != data or any(now[len(data):]):
            # Kafka leaves the active segment's indexes preallocated (zero tail); sealed ones trimmed
            problems.append(f"{path}: Kafka rebuilt {None if now is None else len(now)} bytes that are not ours "
                            f"({len(data)} bytes) plus zero padding")
    with kafkalog.LogStore(ours.root, read_only=True) as store:
        for rq, ans in zip(requests, answers):
            topic = rq["topic"]
            log = store.log(topic, 0)
            if (ans["log_start"], ans["log_end"]) != (log.log_start_offset, log.log_end_offset):
                problems.append(f"{topic}: Kafka loads [{ans['log_start']}, {ans['log_end']}), kafkalog "
                                f"[{log.log_start_offset}, {log.log_end_offset})")
            kafka_rows = consumer_rows(ans["records"])
            ours_rows = kafkalog_rows(log)
            if kafka_rows != ours_rows:
                problems.append(_diff_rows(kafka_rows, ours_rows, f"{topic}: Kafka's UnifiedLog.read vs kafkalog"))
            masked = [r[:1] + (-1,) + r[2:] for r in kafka_rows] if topic == "logappend" else kafka_rows
            if masked != ours.rows(topic, ours.log_start[topic]):
                problems.append(_diff_rows(ours.rows(topic, ours.log_start[topic]), masked,
                                           f"{topic}: Kafka's UnifiedLog.read vs what kafkalog wrote"))
            for t in rq["timestamps"]:
                found = log.offset_for_time(t)
                got = None if found is None else [found.timestamp, found.offset]
                if got != ans["by_timestamp"][str(t)]:
                    problems.append(f"{topic}: timestamp {t}: Kafka's fetchOffsetByTimestamp (timestamp, offset) "
                                    f"{ans['by_timestamp'][str(t)]}, kafkalog {got}")
    assert not problems, "\n".join(problems[:30])


def test_kafka_reads_our_checkpoints(ours, ours_by_kafka):
    ck = ours_by_kafka["checkpoints"]
    d = ours_by_kafka["ck_dir"]
    starts = ck[str(d / "log-start-offset-checkpoint")]
    points = ck[str(d / "recovery-point-offset-checkpoint")]
    assert {k: v for k, v in starts.items() if v} == {"deleted 0": ours.log_start["deleted"],
                                                      "retained 0": ours.log_start["retained"]}, starts
    assert points == {f"{t} 0": ours.log_end[t] for t in A_TOPICS}, points
    # the log start of "deleted" lies inside its first remaining segment, as Kafka's DeleteRecords leaves it
    first = ours.logs("deleted")[0]
    assert int(first.name[:20]) < ours.log_start["deleted"] < int(ours.logs("deleted")[1].name[:20])
    assert int(ours.logs("retained")[0].name[:20]) == ours.log_start["retained"]


# ================================================================================================================
# (b) We read Kafka's
# ================================================================================================================

B_CODEC_TOPICS = [f"codec-{c}" for c in CODECS]
B_TOPICS = [*B_CODEC_TOPICS, "logappend", "compacted", "idempotent", "transactional", "deleterecords"]
DELETE_BEFORE = 23  # Kafka's DeleteRecords on "deleterecords": a log start inside a batch
COMMITS = [{"group": "diskfmt-group", "topic": "codec-zstd", "offset": 42, "metadata": "m1"},
           {"group": "diskfmt-group", "topic": "compacted", "offset": 17, "metadata": ""},
           {"group": "diskfmt-other", "topic": "idempotent", "offset": 80, "metadata": "x"}]
BROKER_EXTRA = {
    "log.cleaner.backoff.ms": 100,                  # the cleaner looks for work every 100 ms (default 15 s)
    "log.cleaner.dedupe.buffer.size": 16 << 20,     # small heap
    "log.cleaner.threads": 1,
    "log.retention.check.interval.ms": 3_600_000,   # retention never runs while we look
}
_BIN = bytes(b for b in range(256) if b not in (10, 13))  # binary values without line breaks (dumps are line-based)


def _b_records(rng: random.Random, tag: str, n: int, t0: int, step: int = 100) -> list[dict]:
    out = []
    for i in range(n):
        key = None if i % 9 == 4 else f"{tag}-k{i}".encode()
        if i % 10 == 7:
            value = None
        elif i % 7 == 3:
            value = bytes(rng.choice(_BIN) for _ in range(rng.randint(1, 60)))
        else:
            value = f"{tag}-v{i}-{'x' * rng.randint(0, 200)}".encode()
        headers = [] if i % 4 == 0 else [(f"h{i % 3}", f"hv{i}".encode())] + ([("nul", None)] if i % 4 == 3 else [])
        ts = t0 + i * step - (50 if i % 6 == 5 else 0)
        out.append({"key": key, "value": value, "headers": headers, "timestamp": ts})
    return out


def _json_records(recs: list[dict]) -> list[dict]:
    def hx(b):
        return None if b is None else b.hex()
    return [{"key": hx(r["key"]), "value": hx(r["value"]), "timestamp": r.get("timestamp"),
             "headers": [[k, hx(v)] for k, v in r["headers"]]} for r in recs]


def _librdkafka_produce(bootstrap: str, topic: str, recs: list[dict], config: dict) -> list[tuple[int, int]]:
    """confluent-kafka (librdkafka): (offset, timestamp) per record, in order."""
    results: dict[int, tuple] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 20, **config})

    def done(i):
        def cb(err, msg):
            results[i] = (err and err.str(), msg.offset(), msg.timestamp()[1])
        return cb

    for i, r in enumerate(recs):
        kw = {"timestamp": r["timestamp"]} if r.get("timestamp") is not None else {}
        producer.produce(topic, value=r["value"], key=r["key"], partition=0, headers=r["headers"] or None,
                         on_delivery=done(i), **kw)
        producer.poll(0)
    assert producer.flush(60) == 0, f"{topic}: librdkafka records still queued after 60 s"
    errors = [v for v in results.values() if v[0]]
    assert not errors and len(results) == len(recs), f"{topic}: librdkafka delivery errors {errors[:3]}"
    return [(results[i][1], results[i][2]) for i in range(len(recs))]


class KafkaSide:
    def __init__(self):
        self.copy: Path | None = None          # the log dir copied after Kafka's clean shutdown
        self.hot: Path | None = None           # copied while Kafka ran
        self.reads: dict[tuple[str, str], dict] = {}
        self.offsets: dict[tuple[str, str], dict] = {}
        self.topics: list[str] = []
        self.produced: dict[str, list[dict]] = {}
        self.dump: dict[str, dict] = {}
        self.dump_run: subprocess.CompletedProcess | None = None
        self.stop_status = None
        self.compaction_wait_s = 0.0
        self.files: dict[str, list[str]] = {}
        self.low_watermarks: dict[str, int] = {}

    def rows(self, topic: str, isolation: str = "read_uncommitted") -> list[tuple]:
        return consumer_rows(self.reads[(topic, isolation)]["records"])

    def logs(self, topic: str, root: Path | None = None) -> list[Path]:
        return segment_logs((root or self.copy) / f"{topic}-0")


def _wait_for_compaction(part_dir: Path, produced: int, timeout: float) -> tuple[list[int], float]:
    """kafka-dump-log over the compacted partition until its offsets have holes (the cleaner ran)."""
    t0 = time.monotonic()
    last = ""
    while time.monotonic() - t0 < timeout:
        logs = segment_logs(part_dir)
        r = kafka_tool("kafka-dump-log", ["--deep-iteration", "--files", ",".join(map(str, logs))], timeout=60)
        if r.returncode == 0:
            offsets = [rec["offset"] for f in parse_kafka_dump(r.stdout).values() for b in f["batches"]
                       for rec in b["records"]]
            holes = any(b - a > 1 for a, b in zip(offsets, offsets[1:]))
            if holes and len(offsets) < produced:
                return offsets, time.monotonic() - t0
            last = f"{len(offsets)} of {produced} records, offsets {offsets[:40]}"
        else:
            last = r.stderr[-1000:]
        time.sleep(0.5)
    raise AssertionError(f"Kafka's cleaner left no hole in {part_dir} within {timeout} s: {last}")


@pytest.fixture(scope="module")
def kafka_side(tmp_path_factory):
    t_start = time.monotonic()
    work = tmp_path_factory.mktemp("diskfmt-kafka")
    broker = KafkaBroker(extra=BROKER_EXTRA, heap=["-Xmx512m", "-Xms128m"])
    side = KafkaSide()
    try:
        try:
            broker.start(work / "broker")
        except (LabError, OSError) as e:
            pytest.fail(f"Kafka 4.4.0 did not start: {e}\n{broker.log_tail()}", pytrace=False)
        _timed("b: Kafka start", t_start)
        t = time.monotonic()
        bootstrap = broker.bootstrap
        rng = random.Random(4404)
        t0 = (int(time.time() * 1000) - 30 * 60_000) // 1000 * 1000  # half an hour ago
        base_cfg = {"retention.ms": "-1", "compression.type": "producer"}
        create = [{"name": name, "config": dict(base_cfg, **{"segment.ms": "60000"})} for name in B_CODEC_TOPICS]
        create += [
            {"name": "logappend", "config": dict(base_cfg, **{"message.timestamp.type": "LogAppendTime"})},
            {"name": "compacted", "config": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                             "segment.ms": "60000", "min.compaction.lag.ms": "0",
                                             "delete.retention.ms": "86400000"}},
            {"name": "idempotent", "config": dict(base_cfg)},
            {"name": "transactional", "config": dict(base_cfg)},
            {"name": "deleterecords", "config": dict(base_cfg)},
        ]
        steps, rdk = [], []
        for c, name in zip(CODECS, B_CODEC_TOPICS):
            java = _b_records(rng, f"{name}-java", 60, t0)
            librd = _b_records(rng, f"{name}-rdk", 60, t0 + 120_000)  # 2 min later in record time: a new segment
            steps.append({"topic": name, "producer": {"compression.type": c, "linger.ms": "20"},
                          "groups": [{"records": _json_records(java)}]})
            rdk.append((name, librd, {"compression.codec": c, "enable.idempotence": False}))
        lat = _b_records(rng, "lat", 90, t0)
        steps.append({"topic": "logappend", "producer": {"compression.type": "lz4", "linger.ms": "5"},
                      "groups": [{"records": _json_records(lat[i:i + 30]), "pause_ms_before": 20}
                                 for i in range(0, 60, 30)]})
        rdk.append(("logappend", lat[60:], {"compression.codec": "zstd"}))
        groups = []
        for g, start in enumerate((t0, t0 + 120_000, t0 + 240_000)):  # three segments by record time
            # keys ck0..ck4 are written again and again (the cleaner drops all but the last); every third record
            # has a key of its own (kept): holes inside the cleaned segments, not only before them
            recs = [{"key": (f"u{g}-{i}" if i % 3 == 1 else f"ck{i % 5}").encode(), "value": f"c{g}-{i}".encode(),
                     "headers": [("g", str(g).encode())], "timestamp": start + i * 100}
                    for i in range(30 if g < 2 else 10)]
            recs.append({"key": b"tomb", "value": None if g == 1 else f"t{g}".encode(), "headers": [],
                         "timestamp": start + 3100})  # g1: a tombstone, the key's last word (kept for a day)
            groups.append({"records": _json_records(recs[:-1] if g == 2 else recs)})
        steps.append({"topic": "compacted", "producer": {"compression.type": "gzip", "linger.ms": "5"},
                      "groups": groups})
        idem = _b_records(rng, "idem", 80, t0)
        steps.append({"topic": "idempotent", "producer": {"enable.idempotence": "true", "acks": "all",
                                                          "max.in.flight.requests.per.connection": "5",
                                                          "batch.size": "2048", "compression.type": "snappy"},
                      "groups": [{"records": _json_records(idem[i:i + 20])} for i in range(0, 60, 20)]})
        rdk.append(("idempotent", idem[60:], {"enable.idempotence": True, "compression.codec": "lz4"}))
        txn = _b_records(rng, "txn", 40, t0)
        cuts = [(0, 8, True), (8, 14, False), (14, 22, True), (22, 30, False), (30, 40, True)]
        steps.append({"topic": "transactional", "producer": {"transactional.id": "diskfmt-txn", "linger.ms": "5",
                                                             "compression.type": "zstd"},
                      "groups": [{"records": _json_records(txn[a:b]), "commit": commit} for a, b, commit in cuts]})
        dr = _b_records(rng, "dr", 50, t0)
        steps.append({"topic": "deleterecords", "producer": {"compression.type": "lz4", "linger.ms": "5"},
                      "groups": [{"records": _json_records(dr[i:i + 10])} for i in range(0, 50, 10)]})
        plan = work / "plan.json"
        plan.write_text(json.dumps({"create": create, "steps": steps,
                                    "delete_records": [{"topic": "deleterecords", "before": DELETE_BEFORE}]}))
        result = disklab_json("produce", bootstrap, plan, timeout=120)
        side.low_watermarks = result["low_watermarks"]
        produced = result["steps"]
        for step, res in zip(steps, produced):
            side.produced.setdefault(step["topic"], []).extend(res)
        for name, recs, cfg in rdk:
            side.produced[name].extend({"offset": o, "timestamp": ts, "committed": True}
                                       for o, ts in _librdkafka_produce(bootstrap, name, recs, cfg))
        _timed("b: produce", t)

        t = time.monotonic()
        _, side.compaction_wait_s = _wait_for_compaction(broker.log_dir / "compacted-0",
                                                           len(side.produced["compacted"]), timeout=60)
        _timed("b: wait for Kafka's cleaner", t)

        t = time.monotonic()
        reads = [{"topic": n} for n in B_TOPICS] + [{"topic": "transactional", "isolation": "read_committed"}]
        queries = []
        for name in B_TOPICS:
            ts = sorted({p["timestamp"] for p in side.produced[name]})
            pick = ts[:: max(1, len(ts) // 30)] + ts[-2:]
            specs = ["earliest", "latest", "max_timestamp", 0,
                     *sorted({*pick, *(x - 1 for x in pick), *(x + 1 for x in pick), ts[-1] + 1000})]
            queries.append({"topic": name, "specs": specs})
            if name == "transactional":
                queries.append({"topic": name, "isolation": "read_committed", "specs": specs})
        req = work / "observe.json"
        req.write_text(json.dumps({"reads": reads, "offsets": queries, "commits": COMMITS}))
        seen = disklab_json("observe", bootstrap, req, timeout=120)
        for r in seen["reads"]:
            side.reads[(r["topic"], r["isolation"].lower())] = r
        for q in seen["offsets"]:
            side.offsets[(q["topic"], q["isolation"].lower())] = q["answers"]
        side.topics = seen["topics"]
        _timed("b: consume + ListOffsets", t)

        # a copy while Kafka runs: active segments' indexes preallocated (10 MiB, zero tail), no clean marker
        t = time.monotonic()
        side.hot = work / "hot"
        side.hot.mkdir()
        for name in B_TOPICS:
            subprocess.run(["cp", "-a", "--sparse=always", str(broker.log_dir / f"{name}-0"), str(side.hot)],
                           check=True)
        for f in broker.log_dir.iterdir():
            if f.is_file():
                shutil.copy2(f, side.hot / f.name)

        side.stop_status = broker.stop(timeout=60)
        side.copy = work / "copy"
        subprocess.run(["cp", "-a", "--sparse=always", str(broker.log_dir), str(side.copy)], check=True)
        side.files = {name: sorted(p.name for p in (side.copy / f"{name}-0").iterdir()) for name in B_TOPICS}
        _timed("b: stop + copy", t)

        t = time.monotonic()
        logs = [p for name in B_TOPICS for p in side.logs(name)]
        side.dump_run = dump_log(logs, "--deep-iteration", "--print-data-log")
        side.dump = parse_kafka_dump(side.dump_run.stdout)
        _timed("b: kafka-dump-log over Kafka's copy", t)
        yield side
    finally:
        broker.stop()
        _timed("b: total (module fixture)", t_start)
        print("\ntimings (s):", json.dumps(TIMINGS))
        print("Kafka's files:", json.dumps({k: v for k, v in side.files.items()
                                            if k in ("compacted", "transactional", "deleterecords")}))
        shutil.rmtree(work, ignore_errors=True)


def test_kafka_side_is_what_we_meant(kafka_side):
    """The workload did what the other tests rely on: Kafka stopped cleanly, every committed record is read back,
    the cleaner holed the compacted log, transactions left aborted records and control batches."""
    s = kafka_side
    assert s.stop_status in (0, 143), f"Kafka's exit status after SIGTERM: {s.stop_status}"
    assert (s.copy / ".kafka_cleanshutdown").is_file()
    for name in B_TOPICS:
        rows = s.rows(name)
        assert rows, f"the consumer read nothing from {name}"
    for name in [*B_CODEC_TOPICS, "logappend", "idempotent"]:
        assert len(s.rows(name)) == len(s.produced[name]), name
    for name in B_CODEC_TOPICS:
        assert len(s.logs(name)) >= 2, f"{name}: Kafka did not roll by record time: {s.files[name]}"
        codecs = {b["compresscodec"] for f in s.logs(name) for b in s.dump[str(f)]["batches"]}
        assert codecs == {name.removeprefix("codec-")}, (name, codecs)
    # compacted: holes, confirmed by kafka-dump-log (its own "Non-consecutive offsets" report) and the consumer
    holes = [p for f, pairs in non_consecutive(s.dump_run.stderr).items() if "compacted-0" in f for p in pairs
             if p[0] != -1]
    offsets = [r[0] for r in s.rows("compacted")]
    assert holes and len(offsets) < len(s.produced["compacted"]), (holes, offsets)
    assert any(b - a > 1 for a, b in zip(offsets, offsets[1:])), offsets
    # transactional: read_committed reads fewer records than read_uncommitted; control batches are on disk
    committed = [p["offset"] for p in s.produced["transactional"] if p["committed"]]
    assert [r[0] for r in s.rows("transactional", "read_committed")] == committed
    assert len(s.rows("transactional")) == len(s.produced["transactional"])
    controls = [b for f in s.logs("transactional") for b in s.dump[str(f)]["batches"] if b["isControl"] == "true"]
    assert len(controls) == 5, controls
    assert any(n.endswith(".txnindex") for n in s.files["transactional"]), s.files["transactional"]
    # deleterecords: Kafka's log start moved inside a batch, and its checkpoint says so after the shutdown
    assert s.low_watermarks == {"deleterecords": DELETE_BEFORE}
    assert s.offsets[("deleterecords", "read_uncommitted")]["earliest"][0] == DELETE_BEFORE
    assert s.rows("deleterecords")[0][0] == DELETE_BEFORE
    assert f"deleterecords 0 {DELETE_BEFORE}" in (s.copy / "log-start-offset-checkpoint").read_text()


def test_kafkalog_check_accepts_kafka_log_dir(kafka_side):
    r = kafkalog_cli("check", kafka_side.copy)
    assert r.returncode == 0 and "CORRUPT" not in r.stdout and r.stdout.startswith("ok:"), \
        f"kafkalog check on Kafka's log dir: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("topic", B_TOPICS)
def test_records_match_kafka_consumer(kafka_side, topic):
    """LogStore(read_only=True).records() over Kafka's files == what Kafka's consumer read (read_uncommitted):
    same offsets (holes and control-batch offsets skipped), timestamps and their type, keys, values, headers."""
    with kafkalog.LogStore(kafka_side.copy, read_only=True) as store:
        got = kafkalog_rows(store.log(topic, 0))
    assert_rows(kafka_side.rows(topic), got, f"{topic}: kafkalog records() vs Kafka's consumer")


@pytest.mark.parametrize("topic", B_TOPICS)
def test_read_columns_match_kafka_consumer(kafka_side, topic):
    with kafkalog.LogStore(kafka_side.copy, read_only=True) as store:
        got = column_rows(store.log(topic, 0).read_columns())
    assert_rows(kafka_side.rows(topic), got, f"{topic}: kafkalog read_columns() vs Kafka's consumer")


@pytest.mark.parametrize("topic", B_TOPICS)
def test_offset_for_time_matches_kafka_list_offsets(kafka_side, topic):
    """Every ListOffsets answer Kafka gave (read_uncommitted): earliest, latest, max timestamp, by timestamp."""
    answers = kafka_side.offsets[(topic, "read_uncommitted")]
    specials = {"earliest": -2, "latest": -1, "max_timestamp": -3}
    problems = []
    with kafkalog.LogStore(kafka_side.copy, read_only=True) as store:
        log = store.log(topic, 0)
        for spec, (k_off, k_ts) in answers.items():
            found = log.offset_for_time(specials.get(spec, None) if spec in specials else int(spec))
            got = [-1, -1] if found is None else [found.offset, found.timestamp]
            if got != [k_off, k_ts]:
                problems.append(f"{spec}: Kafka (offset, timestamp) {[k_off, k_ts]}, kafkalog {got}")
        if log.log_start_offset != answers["earliest"][0] or log.log_end_offset != answers["latest"][0]:
            problems.append(f"log start/end {log.log_start_offset}/{log.log_end_offset}, Kafka's earliest/latest "
                            f"{answers['earliest'][0]}/{answers['latest'][0]}")
    assert not problems, f"{topic}: {len(problems)} of {len(answers)} answers differ:\n" + "\n".join(problems[:25])


def test_transactional_read_committed_view(kafka_side):
    """Kafka's aborted transactions in Kafka's own log dir: kafkalog's read_committed readers (records(),
    read_columns()) return exactly what Kafka's read_committed consumer read, and the read_uncommitted ones the
    aborted records too; the latest offset per isolation level agrees with Kafka's ListOffsets (no transaction is
    open, so the last stable offset is the high watermark)."""
    s = kafka_side
    committed = s.rows("transactional", "read_committed")
    with kafkalog.LogStore(s.copy, read_only=True) as store:
        log = store.log("transactional", 0)
        got = kafkalog_rows(log)
        got_committed = [rec_row(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                         for r in log.records(isolation_level="read_committed")]
        cols_committed = column_rows(log.read_columns(isolation_level="read_committed"))
        latest = log.offset_for_time(-1).offset
        stable = log.last_stable_offset
    assert got_committed == committed, "read_committed records() differ from Kafka's read_committed consumer"
    assert cols_committed == committed, "read_committed read_columns() differ from Kafka's read_committed consumer"
    aborted = sorted({r[0] for r in got} - {r[0] for r in committed})
    expected_aborted = [p["offset"] for p in s.produced["transactional"] if not p["committed"]]
    assert latest == stable == s.offsets[("transactional", "read_committed")]["latest"][0]
    assert aborted == expected_aborted, (
        f"kafkalog's read_uncommitted records beyond read_committed's are {aborted}; the aborted transactions' "
        f"records are {expected_aborted}")


def test_kafkalog_dump_matches_kafka_dump_log(kafka_side):
    """`kafkalog dump DIR --deep` over Kafka's partition dirs: every batch header field kafka-dump-log prints
    (booleans compared case-insensitively; deleteHorizonMs, KIP-534's, included), every data record as kafka-dump-log
    prints it, and the data records from the log start on are what Kafka's consumer read (holes included)."""
    problems = []
    for name in B_TOPICS:
        r = kafkalog_cli("dump", kafka_side.copy / f"{name}-0", "--deep")
        if r.returncode != 0:
            problems.append(f"kafkalog dump {name}-0: exit {r.returncode}: {r.stderr[-500:]}")
            continue
        dumped = parse_kafkalog_dump(r.stdout)
        data = []
        for f in kafka_side.logs(name):
            ours = dumped.get(str(f), [])
            theirs = kafka_side.dump[str(f)]["batches"]
            if len(ours) != len(theirs):
                problems.append(f"{f}: kafkalog dump lists {len(ours)} batches, kafka-dump-log {len(theirs)}")
                continue
            for a, b in zip(ours, theirs):
                fa = {k: v.lower() for k, v in a.items() if k != "records"}
                fb = {k: v.lower() for k, v in b.items() if k != "records"}
                if fa != fb:
                    diff = {k: (fa.get(k), fb.get(k)) for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)}
                    problems.append(f"{f}: batch {b['baseOffset']}: (kafkalog, kafka) {diff}")
                if b["isControl"] == "true":
                    continue
                ra = [(x["offset"], x["timestamp_type"], x["timestamp"], x["key_size"], x["value_size"],
                       [h.split(":", 1)[0] for h in x["headers"].split(",") if h],
                       _shown(None if x["key"] == "null" and x["key_size"] < 0 else x["key"]),
                       _shown(None if x["value"] == "null" and x["value_size"] < 0 else x["value"]))
                      for x in a["records"]]
                rb = [(x["offset"], x["timestamp_type"], x["timestamp"], x["key_size"], x["value_size"],
                       x["header_keys"], _shown(x["key"]), _shown(x["value"])) for x in b["records"]]
                if ra != rb:
                    problems.append(f"{f}: batch {b['baseOffset']} records differ:\n  kafkalog {ra[:3]}\n"
                                    f"  kafka    {rb[:3]}")
                data += [(t[0], t[2], t[6], t[7]) for t in ra]
        start = kafka_side.offsets[(name, "read_uncommitted")]["earliest"][0]
        consumed = [(r[0], r[1], _text(r[3]), _text(r[4])) for r in kafka_side.rows(name)]
        if [d for d in data if d[0] >= start] != consumed:
            problems.append(_diff_rows(consumed, [d for d in data if d[0] >= start],
                                       f"{name}: kafkalog dump's data records vs Kafka's consumer"))
    assert not problems, "\n".join(problems[:20])


def test_read_only_open_changes_nothing(kafka_side, tmp_path):
    """Everything kafkalog does with Kafka's dir here reads: not one byte of any file changes, no file appears."""
    probe = tmp_path / "probe"
    subprocess.run(["cp", "-a", str(kafka_side.copy), str(probe)], check=True)
    before = tree_digest(probe)
    with kafkalog.LogStore(probe, read_only=True) as store:
        for name in B_TOPICS:
            log = store.log(name, 0)
            list(log.records())
            log.read_columns()
            log.offset_for_time(0)
            log.offset_for_time(-3)
    for args in (("check", probe), ("dump", probe / "compacted-0", "--deep"), ("topics", probe)):
        kafkalog_cli(*args)
    after = tree_digest(probe)
    changed = {k for k in before.keys() & after.keys() if before[k] != after[k]}
    assert not changed and before.keys() == after.keys(), (
        f"changed {sorted(changed)}, appeared {sorted(after.keys() - before.keys())}, "
        f"vanished {sorted(before.keys() - after.keys())}")


def test_kafkalog_topics_are_kafka_topics(kafka_side):
    """The topics kafkalog lists in Kafka's log dir are Kafka's topics (internal ones included): the KRaft
    metadata log ``__cluster_metadata-0`` is a partition directory but not a topic."""
    with kafkalog.LogStore(kafka_side.copy, read_only=True) as store:
        ours = store.topics()
    kafka = set(kafka_side.topics)
    assert set(B_TOPICS) <= kafka
    assert set(ours) <= kafka, f"kafkalog lists topics Kafka does not have: {sorted(set(ours) - kafka)}"
    assert kafka <= set(ours), f"kafkalog misses Kafka topics with a directory: {sorted(kafka - set(ours))}"


@pytest.mark.parametrize("topic", ["codec-lz4", "compacted", "transactional"])
def test_hot_copy_of_running_kafka(kafka_side, topic):
    """A copy taken while Kafka ran (active indexes preallocated to 10 MiB with a zero tail, no clean-shutdown
    marker, so a reader must not trust entries = file size / entry size) reads the same records."""
    s = kafka_side
    idx = s.hot / f"{topic}-0" / s.logs(topic)[-1].with_suffix(".index").name
    assert idx.stat().st_size == 10 << 20, f"{idx}: {idx.stat().st_size} bytes (expected Kafka's preallocation)"
    assert not (s.hot / ".kafka_cleanshutdown").exists()
    with kafkalog.LogStore(s.hot, read_only=True) as store:
        log = store.log(topic, 0)
        got = kafkalog_rows(log)
        found = [log.offset_for_time(int(spec)) for spec in s.offsets[(topic, "read_uncommitted")]
                 if spec.lstrip("-").isdigit()]
    assert_rows(s.rows(topic), got, f"{topic}: kafkalog records() over a hot copy vs Kafka's consumer")
    kafka_answers = [a for spec, a in s.offsets[(topic, "read_uncommitted")].items() if spec.lstrip("-").isdigit()]
    ours = [[-1, -1] if f is None else [f.offset, f.timestamp] for f in found]
    assert ours == kafka_answers


def test_kafkalog_groups_reads_kafka_committed_offsets(kafka_side):
    """Kafka's __consumer_offsets (offsets a Java consumer committed to Kafka 4.4.0) read by `kafkalog groups`:
    kafkalog keeps committed offsets in that topic "in Kafka's record format"."""
    r = kafkalog_cli("groups", kafka_side.copy, "--json")
    assert r.returncode == 0, \
        f"kafkalog groups on Kafka's log dir: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    got = {(g["group"], p["topic"], p["partition"]): p["committed"]
           for g in json.loads(r.stdout) for p in g["partitions"]}
    want = {(c["group"], c["topic"], 0): c["offset"] for c in COMMITS}
    assert got == want
