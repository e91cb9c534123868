"""The ``kafkalog`` command (also ``python -m kafkalog``).

    kafkalog demo DIR                          append, time-seek and delete-before on a local directory
    kafkalog topics DATA_DIR [--create NAME --partitions N --config k=v ...]
    kafkalog offsets DATA_DIR TOPIC --time T   time-based seek: T = epoch ms, ISO-8601, 'earliest', 'latest', 'max'
    kafkalog delete-records DATA_DIR TOPIC --partition P --offset O
    kafkalog dump PATH [--deep] [--max-records N]   like kafka-dump-log: a .log/.index/.timeindex file or a dir
    kafkalog check DATA_DIR                    CRCs and index consistency; exit 1 naming file and position

Errors are one line on stderr (exit 1 for kafkalog errors, 2 for usage), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from .errors import KafkaError

EXIT_ERROR = 1
EXIT_USAGE = 2


def _fail(msg: str, code: int = EXIT_ERROR) -> int:
    print(f"kafkalog: error: {msg}", file=sys.stderr)
    return code


def parse_time(text: str) -> int:
    """Epoch milliseconds, an ISO-8601 date/time (UTC when no zone is given), or earliest/latest/max."""
    special = {"earliest": -2, "latest": -1, "max": -3}
    if text.lower() in special:
        return special[text.lower()]
    try:
        return int(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--time {text!r}: expected epoch milliseconds, an ISO-8601 date/time, "
                         "'earliest', 'latest' or 'max'") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def _iso(ts: int) -> str:
    if ts < 0:
        return "-"
    return datetime.fromtimestamp(ts / 1000, tz=UTC).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------------------------------------------- commands

def cmd_topics(args) -> int:
    from .storage import LogStore
    if args.create:
        config = dict(kv.split("=", 1) for kv in args.config or [])
        with LogStore(args.data_dir, maintenance=False) as store:
            store.create_topic(args.create, args.partitions, config)
        print(f"created topic {args.create} with {args.partitions} partition(s)")
        return 0
    with LogStore(args.data_dir, read_only=True) as store:
        rows = []
        for topic in store.topics():
            for p in range(store.partitions_for(topic)):
                try:
                    log = store.log(topic, p)
                    rows.append({"topic": topic, "partition": p, "log_start_offset": log.log_start_offset,
                                 "log_end_offset": log.log_end_offset, "size_bytes": log.size_in_bytes,
                                 "segments": len(log.segments())})
                except KafkaError:
                    rows.append({"topic": topic, "partition": p, "log_start_offset": None, "log_end_offset": None,
                                 "size_bytes": None, "segments": 0})
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'topic':30} {'partition':>9} {'start':>12} {'end':>12} {'bytes':>14} {'segments':>8}")
        for r in rows:
            print(f"{r['topic']:30} {r['partition']:>9} {r['log_start_offset']!s:>12} {r['log_end_offset']!s:>12} "
                  f"{r['size_bytes']!s:>14} {r['segments']:>8}")
    return 0


def cmd_offsets(args) -> int:
    from .storage import LogStore
    target = parse_time(args.time)
    out = []
    with LogStore(args.data_dir, read_only=True) as store:
        parts = [args.partition] if args.partition is not None else range(store.partitions_for(args.topic))
        for p in parts:
            found = store.log(args.topic, p).offset_for_time(target)
            out.append({"topic": args.topic, "partition": p, "offset": None if found is None else found.offset,
                        "timestamp": None if found is None else found.timestamp})
    if args.json:
        print(json.dumps(out))
    else:
        for r in out:
            if r["offset"] is None:
                print(f"{r['topic']} {r['partition']} - (no record at or after the time)")
            else:
                print(f"{r['topic']} {r['partition']} {r['offset']} {r['timestamp']} {_iso(r['timestamp'])}")
    return 0


def cmd_delete_records(args) -> int:
    from .storage import LogStore
    with LogStore(args.data_dir, maintenance=False) as store:
        new_start = store.log(args.topic, args.partition).delete_records_before(args.offset)
    print(f"{args.topic} {args.partition} log_start_offset={new_start}")
    return 0


def _open_raw(path: Path):
    f = open(path, "rb")
    size = os.fstat(f.fileno()).st_size
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    f.close()
    return mm


def _walk_log(path: Path):
    """Yield (position, batch or None, problem or None) over a .log file, stopping at the first problem."""
    from ._engine.records import RecordBatch
    data = _open_raw(path)
    n = len(data)
    pos = 0
    while pos < n:
        if n - pos < 17:
            yield pos, None, f"{n - pos} trailing bytes (a torn write?)"
            return
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if length < 49:
            yield pos, None, f"illegal batch length {length}"
            return
        if pos + 12 + length > n:
            yield pos, None, f"batch of {length + 12} bytes runs past the end of the file ({n} bytes)"
            return
        batch = RecordBatch(data, pos)
        try:
            batch.validate()
        except KafkaError as e:
            yield pos, batch, str(e)
            return
        yield pos, batch, None
        pos += batch.size_in_bytes


def _dump_log(path: Path, deep: bool, max_records: int | None) -> int:
    print(f"Dumping {path}")
    shown = 0
    for pos, batch, problem in _walk_log(path):
        if batch is None:
            print(f"position: {pos} ERROR: {problem}")
            return EXIT_ERROR
        codec = ["none", "gzip", "snappy", "lz4", "zstd"][batch.compression] if batch.compression < 5 else "?"
        ttype = "LogAppendTime" if batch.timestamp_type else "CreateTime"
        print(f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.record_count} "
              f"baseSequence: {batch.base_sequence} lastSequence: "
              f"{batch.base_sequence + batch.last_offset_delta if batch.base_sequence >= 0 else -1} "
              f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
              f"partitionLeaderEpoch: {batch.partition_leader_epoch} isTransactional: {batch.is_transactional} "
              f"isControl: {batch.is_control} position: {pos} {ttype}: {batch.max_timestamp} "
              f"size: {batch.size_in_bytes} magic: {batch.magic} compresscodec: {codec} crc: {batch.crc} "
              f"isvalid: {problem is None}")
        if problem:
            print(f"position: {pos} ERROR: {problem}")
            return EXIT_ERROR
        if deep:
            for rec in batch:
                if max_records is not None and shown >= max_records:
                    return 0
                shown += 1
                key = rec.key.decode("utf-8", "replace") if rec.key is not None else "null"
                val = rec.value.decode("utf-8", "replace") if rec.value is not None else "null"
                hdrs = ",".join(f"{k}:{(v or b'').decode('utf-8', 'replace')}" for k, v in rec.headers)
                print(f"| offset: {rec.offset} {ttype}: {rec.timestamp} keySize: "
                      f"{-1 if rec.key is None else len(rec.key)} valueSize: "
                      f"{-1 if rec.value is None else len(rec.value)} headerKeys: [{hdrs}] key: {key} payload: {val}")
    return 0


def _index_entries(path: Path):
    if path.suffix == ".index":
        dt = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    else:
        dt = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    raw = np.fromfile(path, dtype=np.uint8)
    whole = len(raw) // dt.itemsize * dt.itemsize
    arr = raw[:whole].view(dt)
    # trailing all-zero entries are preallocated space, not entries
    nonzero = np.flatnonzero(raw[:whole].reshape(-1, dt.itemsize).any(axis=1)) if whole else np.empty(0, int)
    n = int(nonzero[-1]) + 1 if len(nonzero) else 0
    return arr[:n], len(raw) - whole


def _dump_index(path: Path) -> int:
    base = int(path.name[:20])
    entries, extra = _index_entries(path)
    print(f"Dumping {path}")
    for e in entries:
        if path.suffix == ".index":
            print(f"offset: {base + int(e['rel'])} position: {int(e['pos'])}")
        else:
            print(f"timestamp: {int(e['ts'])} offset: {base + int(e['rel'])}")
    if extra:
        print(f"ERROR: {extra} trailing bytes are not a whole entry")
        return EXIT_ERROR
    return 0


def cmd_dump(args) -> int:
    path = Path(args.path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
    elif path.exists():
        files = [path]
    else:
        return _fail(f"no such file or directory: {path}")
    rc = 0
    for f in files:
        if f.suffix == ".log":
            rc = max(rc, _dump_log(f, args.deep, args.max_records))
        elif f.suffix in (".index", ".timeindex"):
            rc = max(rc, _dump_index(f))
        else:
            return _fail(f"{f}: not a .log, .index or .timeindex file")
    return rc


def check_partition_dir(d: Path) -> list[str]:
    """Every problem found in one partition directory, each naming file and position."""
    problems = []
    logs = sorted(p for p in d.iterdir() if p.suffix == ".log" and p.name[:20].isdigit())
    prev_next = None
    for log in logs:
        base = int(log.name[:20])
        if prev_next is not None and base != prev_next:
            problems.append(f"{log}: segment starts at offset {base} but the previous one ends at {prev_next - 1} "
                            f"({'gap' if base > prev_next else 'overlap'})")
        batch_at = {}
        max_ts = -1
        for pos, batch, problem in _walk_log(log):
            if problem:
                problems.append(f"{log}: position {pos}: {problem}")
                break
            if batch.base_offset < base or (prev_next is not None and batch.base_offset < prev_next):
                problems.append(f"{log}: position {pos}: offset {batch.base_offset} goes backwards "
                                f"(expected >= {max(base, prev_next or base)})")
                break
            batch_at[pos] = batch.last_offset
            prev_next = batch.last_offset + 1
            max_ts = max(max_ts, batch.max_timestamp)
        idx = log.with_suffix(".index")
        if idx.exists():
            entries, extra = _index_entries(idx)
            if extra:
                problems.append(f"{idx}: {extra} trailing bytes are not a whole entry")
            last = -1
            for i, e in enumerate(entries):
                off, pos = base + int(e["rel"]), int(e["pos"])
                if off <= last:
                    problems.append(f"{idx}: entry {i}: offset {off} not increasing")
                    break
                if batch_at.get(pos) != off:
                    problems.append(f"{idx}: entry {i}: offset {off} -> position {pos} is not the start of the "
                                    f"batch ending at that offset")
                    break
                last = off
        tidx = log.with_suffix(".timeindex")
        if tidx.exists():
            entries, extra = _index_entries(tidx)
            if extra:
                problems.append(f"{tidx}: {extra} trailing bytes are not a whole entry")
            last_ts, last_off = -1, -1
            for i, e in enumerate(entries):
                ts, off = int(e["ts"]), base + int(e["rel"])
                if ts <= last_ts or off < last_off:
                    problems.append(f"{tidx}: entry {i}: ({ts}, {off}) does not increase")
                    break
                if ts > max_ts:
                    problems.append(f"{tidx}: entry {i}: timestamp {ts} above the segment's max {max_ts}")
                    break
                last_ts, last_off = ts, off
    return problems


def cmd_check(args) -> int:
    root = Path(args.data_dir)
    if not root.is_dir():
        return _fail(f"no such data dir: {root}")
    dirs = [root] if any(p.suffix == ".log" for p in root.iterdir()) else sorted(
        p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    problems = []
    nseg = 0
    for d in dirs:
        nseg += sum(1 for p in d.iterdir() if p.suffix == ".log")
        problems += check_partition_dir(d)
    for p in problems:
        print(f"CORRUPT {p}")
    if problems:
        return EXIT_ERROR
    print(f"ok: {len(dirs)} partition dir(s), {nseg} segment(s), every batch CRC-valid, indexes consistent")
    return 0


def cmd_demo(args) -> int:
    """The README's first command: a durable local log, a time seek and a delete-before, end to end."""
    from .storage import LogStore
    path = Path(args.dir)
    t0 = 1_700_000_000_000
    with LogStore(path, {"segment.bytes": 1 << 20}, exclusive=True) as store:
        if "events" not in store.topics():
            store.create_topic("events", partitions=1)
        log = store.log("events", 0)
        start = log.log_end_offset
        n = 100_000
        for i in range(0, n, 1000):
            values = [b'{"event":"click","n":%d}' % j for j in range(i, i + 1000)]
            log.append_batch(values, timestamps=[t0 + j * 1000 for j in range(i, i + 1000)])
        log.flush()
        print(f"appended {n} records at offsets {start}..{log.log_end_offset - 1} in {path} "
              f"({len(log.segments())} segments, fsynced)")
        target = t0 + (n // 2) * 1000
        found = log.offset_for_time(target)
        print(f"time seek {_iso(target)} -> offset {found.offset} (record timestamp {found.timestamp})")
        first = next(log.records(found.offset))
        print(f"record at that offset: {first.value.decode()}")
        new_start = log.delete_records_before(found.offset)
        print(f"delete-before {found.offset} -> log start offset {new_start}, {len(log.segments())} segments left")
        try:
            log.read(new_start - 1)
        except KafkaError as e:
            print(f"reading below it fails as it should: {e.name}")
    return 0


# ---------------------------------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kafkalog", description="kafkalog: an embedded Kafka-compatible log engine")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="append, time-seek and delete-before on a local directory")
    p.add_argument("dir")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("topics", help="list (or create) topics")
    p.add_argument("data_dir")
    p.add_argument("--create", metavar="NAME")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--config", action="append", metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("offsets", help="offsets for a time (time-based seek)")
    p.add_argument("data_dir")
    p.add_argument("topic")
    p.add_argument("--time", required=True, help="epoch ms, ISO-8601, earliest, latest or max")
    p.add_argument("--partition", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_offsets)

    p = sub.add_parser("delete-records", help="advance a partition's log start offset (KIP-107)")
    p.add_argument("data_dir")
    p.add_argument("topic")
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--offset", type=int, required=True, help="-1 = high watermark")
    p.set_defaults(func=cmd_delete_records)

    p = sub.add_parser("dump", help="print batches, records (--deep) and index entries")
    p.add_argument("path")
    p.add_argument("--deep", action="store_true", help="also print every record")
    p.add_argument("--max-records", type=int)
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("check", help="verify CRCs and index consistency")
    p.add_argument("data_dir")
    p.set_defaults(func=cmd_check)
    return ap


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KafkaError as e:
        return _fail(str(e))
    except (OSError, ValueError) as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
