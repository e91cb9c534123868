"""The ``kafkalog`` command (also ``python -m kafkalog``).

    kafkalog demo DIR                          append, time-seek and delete-before on a local directory
    kafkalog topics DATA_DIR [--create NAME --partitions N --config k=v ...]
    kafkalog produce DATA_DIR TOPIC [--key-separator SEP] [--partition P] [--compression none|gzip|lz4|zstd|snappy]
                                    [--create [--partitions N]] [--quiet]          stdin lines -> records, fsynced
    kafkalog consume DATA_DIR TOPIC [--from-beginning | --offset N --partition P | --from-time T] [--group G]
                                    [--max-messages N] [--follow] [--print-key] [--key-separator SEP]
                                    [--format text|json [--base64]] [--quiet]     records -> stdout, one per line
    kafkalog offsets DATA_DIR TOPIC --time T   time-based seek: T = epoch ms, ISO-8601, 'earliest', 'latest', 'max'
    kafkalog delete-records DATA_DIR TOPIC (--before OFFSET | --before-time T) [--partition P]
                                               KIP-107; --offset is --before; all partitions unless --partition
    kafkalog groups DATA_DIR [GROUP] [--json]  committed offset, log end offset, lag and members per partition
    kafkalog dump PATH [--deep] [--max-records N]   like kafka-dump-log: a .log/.index/.timeindex file or a dir
    kafkalog check DATA_DIR                    CRCs and index consistency; exit 1 naming file and position
    kafkalog serve [--data-dir DIR] [--listen HOST:PORT] [--config server.properties] [--override KEY=VALUE ...]
                   [--metrics HOST:PORT] [--parent-pid PID] [--control-stdin]
    kafkalog quotas --bootstrap-server HOST:PORT [--client-id ID | --default] [--producer-byte-rate R]
                    [--consumer-byte-rate R]          client quotas of a running broker (list when nothing to set)
    kafkalog users DATA_DIR add NAME [--password P | --password-stdin] | remove NAME | list
                                               SASL/SCRAM users (salted SCRAM credentials, never passwords)
    kafkalog acls DATA_DIR --add|--remove|--list --allow-principal User:x --operation READ --topic T ...
                                               the broker's ACLs, with kafka-acls.sh's flags
                                               a Kafka-compatible broker over DATA_DIR (Kafka clients unchanged)

produce: each stdin line (without its trailing newline) is a record value; with ``--key-separator`` the line is
split at the first SEP into key and value, and a line without SEP stops the run with exit 1 naming the line: the
lines before it are written and fsynced, that line and the rest are not. The topic must exist unless ``--create``
(then it is created with ``--partitions``, default 1). Keyed records go where Kafka's murmur2 partitioner puts them,
unkeyed ones use the sticky partitioner (KafkaProducer); everything is fsynced before the summary line on stderr.

consume: the start of each partition is, in this order, ``--offset`` / ``--from-time`` (explicit seeks), the
group's committed offset (``--group``; clamped into [log start, log end]), the log start with ``--from-beginning``,
else the log end (like kafka-console-consumer). Without ``--follow`` it stops at the log end as of its start. With
``--group`` positions are committed about every second, before waiting for new records, and at the end (also on
SIGINT/SIGTERM, which end the run with exit 0). Text output writes the value bytes as they are (``null`` for a null
key or value); ``--format json`` prints one object per record with key, value and header values as UTF-8 text
(invalid bytes as ``\\xNN`` escapes) or, with ``--base64``, as base64 of the exact bytes.

A progress line (records and records/s) is drawn on stderr for produce and consume when stderr is a terminal
and ``--quiet`` is not given. Errors are one line on stderr (exit 1 for kafkalog errors, 2 for usage), never a
traceback.
"""

from __future__ import annotations

import argparse
import base64
import json
import mmap
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from .errors import (
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

EXIT_ERROR = 1
EXIT_USAGE = 2

COMPRESSIONS = ("none", "gzip", "lz4", "zstd", "snappy")
PRODUCE_CHUNK_BYTES = 1 << 20  # stdin is read in chunks of at most this, split into lines in C
PRODUCE_LINGER_MS = 20  # a slow stdin (a terminal, a pipe that trickles) still gets its records written soon
PRODUCE_BATCH_BYTES = 1 << 18
CONSUME_CHUNK_RECORDS = 10_000  # records taken from one partition before the next partition gets its turn
FOLLOW_POLL_S = 0.002  # --follow: how often other processes' appends are looked for (has_data_after)
COMMIT_INTERVAL_S = 1.0  # --group: Kafka's auto.commit.interval.ms, shorter: a CLI run is often short
PROGRESS_INTERVAL_S = 0.1


class UsageError(Exception):
    """A command line that is wrong in a way argparse cannot see: exit 2."""


def _fail(msg: str, code: int = EXIT_ERROR) -> int:
    print(f"kafkalog: error: {msg}", file=sys.stderr)
    return code


def parse_time(text: str, option: str = "--time", special: bool = True) -> int:
    """Epoch milliseconds, an ISO-8601 date/time (UTC when no zone is given), or (``special``)
    earliest/latest/max. Without ``special`` the time must be >= 0 (a real point in time)."""
    names = {"earliest": -2, "latest": -1, "max": -3}
    expected = ("expected epoch milliseconds, an ISO-8601 date/time, 'earliest', 'latest' or 'max'" if special
                else "expected epoch milliseconds or an ISO-8601 date/time (at or after 1970)")
    if special and text.lower() in names:
        return names[text.lower()]
    try:
        value = int(text)
    except ValueError:
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{option} {text!r}: {expected}") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        value = int(dt.timestamp() * 1000)
    if not special and value < 0:
        raise ValueError(f"{option} {text!r}: {expected}")
    return value


def _iso(ts: int) -> str:
    if ts < 0:
        return "-"
    return datetime.fromtimestamp(ts / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _require_data_dir(path) -> Path:
    """Commands that open a store for writing would create a missing data dir: refuse a mistyped one first."""
    root = Path(path)
    if not root.is_dir():
        raise KafkaStorageError(2, f"no kafkalog data dir at {root}")
    return root


# ---------------------------------------------------------------------------------------------------- progress

def render_progress(verb: str, count: int, elapsed: float) -> str:
    """The progress line (no control characters): ``produced 1,234,567 records | 456,789 records/s | 2.7 s``."""
    rate = f"{count / elapsed:,.0f}" if elapsed > 0 else "-"
    return f"{verb} {count:,} records | {rate} records/s | {elapsed:.1f} s"


class Progress:
    """A one-line progress display on ``stream``, redrawn in place with \\r at most every ``interval`` seconds (the
    first draw only after one interval, so short runs print nothing) and erased by ``clear()``. Does nothing
    unless ``enabled``. Not thread-safe: one command's main thread drives it."""

    def __init__(self, verb: str, enabled: bool, stream=None, clock=time.monotonic,
                 interval: float = PROGRESS_INTERVAL_S):
        self.verb = verb
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.interval = interval
        self.start = clock() if enabled else 0.0
        self.last = self.start
        self.width = 0

    def update(self, count: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if now - self.last < self.interval:
            return
        self.last = now
        line = render_progress(self.verb, count, now - self.start)
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def clear(self) -> None:
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _progress(verb: str, args) -> Progress:
    return Progress(verb, enabled=not args.quiet and os.isatty(2))


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
    before_time = parse_time(args.before_time, "--before-time", special=False) if args.before_time is not None \
        else None
    _require_data_dir(args.data_dir)
    with LogStore(args.data_dir, maintenance=False) as store:
        n = store.partitions_for(args.topic)
        parts = [args.partition] if args.partition is not None else range(n)
        logs = {p: store.log(args.topic, p) for p in parts}
        targets = {}
        for p, log in logs.items():  # every target is checked before anything is deleted
            if before_time is not None:
                found = log.offset_for_time(before_time)  # first offset with timestamp >= T
                targets[p] = -1 if found is None else found.offset  # none: every record is older
            else:
                hw = log.high_watermark
                if args.before != -1 and not 0 <= args.before <= hw:
                    raise OffsetOutOfRangeError(
                        f"--before {args.before} is out of range for {args.topic}-{p}: high watermark {hw} "
                        "(use -1 for the high watermark); nothing was deleted")
                targets[p] = args.before
        for p, log in logs.items():
            print(f"{args.topic} {p} log_start_offset={log.delete_records_before(targets[p])}")
    return 0


# ---------------------------------------------------------------------------------------------------- produce

class _LineError(ValueError):
    """A stdin line that cannot become a record; ``sent`` records before it were sent; ``refused`` says whether
    the producer counted the line as a failed record."""

    def __init__(self, msg: str, sent: int, refused: bool = False):
        super().__init__(msg)
        self.sent = sent
        self.refused = refused


class _Interrupted(Exception):
    """SIGINT/SIGTERM while producing: stop reading, keep what was read (raised only while blocked in a read)."""


class _StopOnSignal:
    """SIGINT/SIGTERM handlers for the time of a produce run: the signal is noted; a read blocked on stdin is
    broken off at once, anything else finishes its step first (a record is never half sent)."""

    def __init__(self):
        self.signum = None
        self.reading = False

    def __enter__(self):
        self.old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for sig, handler in self.old.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame):
        self.signum = signum
        if self.reading:
            raise _Interrupted()

    def read1(self, stream, n: int) -> bytes:
        if self.signum is not None:
            raise _Interrupted()
        self.reading = True
        try:
            return stream.read1(n)
        finally:
            self.reading = False


def _stdin_lines(stream, stop: _StopOnSignal | None = None):
    """Lists of lines (bytes, newline removed) from a binary stream, read in chunks; the last line may lack its
    newline. ``read1`` returns what is there, so lines typed at a terminal are sent as they come. With ``stop``,
    a signal ends the lines (_Interrupted) between chunks; a line without its newline yet is not taken."""
    pending: list[bytes] = []
    while True:
        data = stream.read1(PRODUCE_CHUNK_BYTES) if stop is None else stop.read1(stream, PRODUCE_CHUNK_BYTES)
        if not data:
            tail = b"".join(pending)
            if tail:
                yield [tail]
            return
        if b"\n" not in data:
            pending.append(data)  # part of a long line
            continue
        if pending:
            pending.append(data)
            data = b"".join(pending)
            pending = []
        lines = data.split(b"\n")
        last = lines.pop()
        if last:
            pending.append(last)
        yield lines


def _send_lines(producer, topic: str, stream, sep: bytes | None, partition: int | None, max_bytes: int,
                progress: Progress, stop: _StopOnSignal | None = None) -> int:
    send = producer.send
    big = max_bytes - 128  # a line this long may be refused (RecordTooLargeError): look at its future at once
    count = 0
    lineno = 0
    try:
        for lines in _stdin_lines(stream, stop):
            for line in lines:
                lineno += 1
                if sep is None:
                    key, value = None, line
                else:
                    key, found, value = line.partition(sep)
                    if not found:
                        raise _LineError(f"line {lineno}: no key separator "
                                         f"{sep.decode(errors='backslashreplace')!r}", count)
                future = send(topic, value, key, None, partition)
                if len(line) > big and future.failed():
                    raise _LineError(f"line {lineno}: {future.exception}", count, refused=True)
                count += 1
            progress.update(count)
    except _Interrupted:
        pass  # the lines read so far are sent; the caller writes, fsyncs and reports them
    return count


def cmd_produce(args) -> int:
    from .client.producer import KafkaProducer
    from .storage import LogStore
    sep = None
    if args.key_separator is not None:
        if not args.key_separator:
            raise UsageError("--key-separator must not be empty")
        sep = args.key_separator.encode()
    if not args.create:
        _require_data_dir(args.data_dir)
    progress = _progress("produced", args)
    with LogStore(args.data_dir, maintenance=False) as store:
        if args.topic not in store.topics():
            if not args.create:
                raise UnknownTopicOrPartitionError(
                    f"unknown topic {args.topic!r} in {store.path} (--create creates it)")
            try:
                store.create_topic(args.topic, args.partitions)
            except TopicAlreadyExistsError:
                pass  # another process created it first
        n = store.partitions_for(args.topic)
        if args.partition is not None and not 0 <= args.partition < n:
            raise UnknownTopicOrPartitionError(
                f"partition {args.partition} of topic {args.topic!r} does not exist (it has {n}: 0..{n - 1})")
        max_bytes = store.topic_config(args.topic)["max.message.bytes"]
        # acks=1: batches are written as they fill; one fsync per partition at the end makes the run durable
        producer = KafkaProducer(store, acks=1, linger_ms=PRODUCE_LINGER_MS, batch_size=PRODUCE_BATCH_BYTES,
                                 max_request_size=max_bytes, allow_auto_create_topics=False,
                                 compression_type=None if args.compression == "none" else args.compression)
        bad = None
        with _StopOnSignal() as stop:
            try:
                count = _send_lines(producer, args.topic, sys.stdin.buffer, sep, args.partition, max_bytes, progress,
                                    stop)
            except _LineError as e:
                bad, count = e, e.sent
            finally:
                progress.clear()
                producer.close()  # writes whatever is still lingering, also on errors
            failed = producer.metrics()["producer-metrics"]["record-error-total"] - (bad is not None and bad.refused)
            for p in range(n):
                store.log(args.topic, p).flush()
    if stop.signum is not None:
        # SIGINT/SIGTERM: what was read is written and fsynced; say so, and exit as a signal-stopped command does
        name = signal.Signals(stop.signum).name
        print(f"produced {count} records to {args.topic} (stopped by {name}; every line read before it is written "
              f"and fsynced)", file=sys.stderr)
        return 128 + stop.signum
    if bad is not None:
        return _fail(f"{bad}; it and the lines after it were not produced, the {count} records before it were "
                     "written and fsynced")
    if failed:
        return _fail(f"{failed} of {count} records to {args.topic} were not written")
    if not args.quiet:
        print(f"produced {count} records to {args.topic}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------------- consume

def _offset_arg(text: str):
    """--offset: a non-negative offset, 'earliest' or 'latest'."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an offset >= 0, 'earliest' or 'latest'")
    return value


def _bytes_text(b64: bool):
    if b64:
        return lambda b: None if b is None else base64.b64encode(b).decode("ascii")
    return lambda b: None if b is None else b.decode("utf-8", "backslashreplace")


def _formatter(args):
    """fmt(partition, record) -> the output line (bytes, with its newline)."""
    topic = args.topic
    if args.format == "json":
        text = _bytes_text(args.base64)

        def fmt(p, r):
            return (json.dumps({"topic": topic, "partition": p, "offset": r.offset, "timestamp": r.timestamp,
                                "timestamp_type": "LogAppendTime" if r.timestamp_type else "CreateTime",
                                "key": text(r.key), "value": text(r.value),
                                "headers": [[k, text(v)] for k, v in r.headers]},
                               ensure_ascii=False) + "\n").encode()
        return fmt
    if args.print_key or args.key_separator is not None:
        sep = (args.key_separator if args.key_separator is not None else "\t").encode()

        def fmt(p, r):
            return (b"null" if r.key is None else r.key) + sep + (b"null" if r.value is None else r.value) + b"\n"
        return fmt
    return lambda p, r: (b"null" if r.value is None else r.value) + b"\n"


def _start_offset(args, log, p: int, from_time: int | None, committed, committed_only: bool = False) -> int:
    lso, leo = log.log_start_offset, log.log_end_offset
    latest = log.last_stable_offset if committed_only else leo  # read_committed: "latest" is the last stable offset
    if args.offset is not None:
        offset = {"earliest": lso, "latest": latest}.get(args.offset, args.offset)
        if not lso <= offset <= leo:
            raise OffsetOutOfRangeError(f"--offset {offset} is out of range for {args.topic}-{p}: log start offset "
                                        f"{lso}, log end offset {leo}")
        return offset
    if from_time is not None:
        found = log.offset_for_time(from_time)
        return latest if found is None else found.offset
    if committed is not None:
        return min(max(committed.offset, lso), leo)  # deleted below it, or past a truncated end: nearest valid
    return lso if args.from_beginning else latest


def _wait_stable(store, group: str, tps, timeout_s: float = 60.0) -> None:
    """read_committed: a group's offset commit inside an open transaction is not used before the transaction ends
    (Kafka's RequireStable); wait for it up to ``timeout_s``."""
    from .errors import UnstableOffsetCommitError
    deadline = time.monotonic() + timeout_s
    while tps & store.offsets.pending(group):
        if time.monotonic() >= deadline:
            raise UnstableOffsetCommitError(f"group {group!r} has offset commits in a transaction still open after "
                                            f"{timeout_s:.0f} s: {sorted(tps & store.offsets.pending(group))}")
        time.sleep(0.05)


def cmd_consume(args) -> int:
    from .storage import LogStore
    from .structs import OffsetAndMetadata, TopicPartition
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be at least 1")
    if args.base64 and args.format != "json":
        raise UsageError("--base64 goes with --format json")
    from_time = parse_time(args.from_time, "--from-time", special=False) if args.from_time is not None else None
    root = _require_data_dir(args.data_dir)
    fmt = _formatter(args)
    topic, group, limit = args.topic, args.group, args.max_messages
    # commits need a writer; without a group nothing is written
    store = LogStore(root, maintenance=False) if group else LogStore(root, read_only=True)
    committed_only = args.isolation_level == "read_committed"
    iso = args.isolation_level
    with store:
        n = store.partitions_for(topic)
        if args.partition is not None and not 0 <= args.partition < n:
            raise UnknownTopicOrPartitionError(
                f"partition {args.partition} of topic {topic!r} does not exist (it has {n}: 0..{n - 1})")
        parts = [args.partition] if args.partition is not None else list(range(n))
        logs = {p: store.log(topic, p) for p in parts}
        if group and committed_only:
            _wait_stable(store, group, {TopicPartition(topic, p) for p in parts})
        committed = store.offsets.committed_all(group) if group else {}
        pos = {p: _start_offset(args, logs[p], p, from_time, committed.get(TopicPartition(topic, p)), committed_only)
               for p in parts}

        def end_of(log) -> int:
            return log.last_stable_offset if committed_only else log.log_end_offset

        def has_more(p) -> bool:
            log = logs[p]
            return log.has_data_after(pos[p]) and (not committed_only or log.last_stable_offset > pos[p])

        ends = None if args.follow else {p: end_of(logs[p]) for p in parts}

        def commit(sync: bool) -> None:
            store.offsets.commit(group, {TopicPartition(topic, p): OffsetAndMetadata(o) for p, o in pos.items()},
                                 sync=sync)

        stop, wake = threading.Event(), threading.Event()

        def on_signal(signum, frame):
            stop.set()
            wake.set()

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        for log in logs.values():
            log.add_waiter(wake)  # appends through this process's store; other processes: has_data_after
        progress = _progress("consumed", args)
        out = sys.stdout.buffer
        count = 0
        dirty = False
        last_commit = time.monotonic()
        try:
            while not stop.is_set() and (limit is None or count < limit):
                moved = False
                for p in parts:
                    if stop.is_set() or (limit is not None and count >= limit):
                        break
                    log, start = logs[p], pos[p]
                    end = ends[p] if ends is not None else end_of(log)
                    if start >= end:
                        continue
                    lines = []
                    offset = start
                    want = CONSUME_CHUNK_RECORDS if limit is None else min(CONSUME_CHUNK_RECORDS, limit - count)
                    try:
                        for rec in log.records(start, end, isolation_level=iso):
                            lines.append(fmt(p, rec))
                            offset = rec.offset + 1
                            if len(lines) >= want:
                                break
                        else:
                            offset = end  # everything below end was seen (control records, gaps are skipped)
                    except OffsetOutOfRangeError:
                        # deleted below our position meanwhile (delete-records, retention): go on from the start
                        offset = log.log_start_offset
                        print(f"kafkalog: {topic}-{p}: offset {start} was deleted, going on from the log start "
                              f"offset {offset}", file=sys.stderr)
                        lines = []
                    if lines:
                        out.write(b"".join(lines))
                        out.flush()
                        count += len(lines)
                    if offset != start:
                        pos[p] = offset
                        moved = dirty = True
                progress.update(count)
                if group and dirty and time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                    commit(False)
                    dirty, last_commit = False, time.monotonic()
                if moved:
                    continue
                if not args.follow:
                    break
                if group and dirty:  # about to wait: let others see where we are
                    commit(False)
                    dirty, last_commit = False, time.monotonic()
                while not stop.is_set() and not any(has_more(p) for p in parts):
                    wake.wait(FOLLOW_POLL_S)
                    wake.clear()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for log in logs.values():
                log.remove_waiter(wake)
            progress.clear()
            if group:
                commit(True)
    if not args.quiet:
        print(f"consumed {count} records from {topic}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------------- groups

def _describe_members(store, group: str) -> list | None:
    """Live members of ``group`` from kafkalog.client.group when that module offers ``describe_group``, else None
    (unknown: offsets alone do not say who consumes)."""
    try:
        from .client.group import describe_group
    except ImportError:
        return None
    try:
        return list(describe_group(store, group)["members"])
    except (AttributeError, KeyError, TypeError):
        return None


def _assigned(assignment) -> list[tuple[str, int]]:
    """(topic, partition) pairs of a member's assignment: [TopicPartition | (topic, partition)] or
    {topic: [partition]}."""
    if isinstance(assignment, dict):
        return [(t, int(p)) for t, ps in assignment.items() for p in ps]
    return [(t, int(p)) for t, p in assignment or ()]


def cmd_groups(args) -> int:
    from .storage import LogStore
    rows = []
    with LogStore(args.data_dir, read_only=True) as store:
        names = [args.group] if args.group else store.offsets.groups()
        for group in names:
            committed = store.offsets.committed_all(group)
            members = _describe_members(store, group)
            if args.group and not committed and not members:
                return _fail(f"unknown consumer group {group!r}: no committed offsets and no members in {store.path}")
            owner = {tp: m.get("member_id") for m in members or () for tp in _assigned(m.get("assignment"))}
            parts = []
            for tp in sorted(committed):
                try:
                    end = store.log(tp.topic, tp.partition).log_end_offset
                except UnknownTopicOrPartitionError:
                    end = None  # the topic was deleted after the commit
                offset = committed[tp].offset
                parts.append({"topic": tp.topic, "partition": tp.partition, "committed": offset,
                              "log_end_offset": end, "lag": None if end is None else end - offset,
                              "member": owner.get((tp.topic, tp.partition))})
            rows.append({"group": group, "partitions": parts,
                         "members": None if members is None else [
                             {"member_id": m.get("member_id"), "client_id": m.get("client_id"), "pid": m.get("pid"),
                              "assignment": [list(tp) for tp in _assigned(m.get("assignment"))]}
                             for m in members]})
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'group':24} {'topic':24} {'partition':>9} {'committed':>12} {'log-end':>12} {'lag':>10}  member")
    for r in rows:
        for x in r["partitions"]:
            print(f"{r['group']:24} {x['topic']:24} {x['partition']:>9} {x['committed']:>12} "
                  f"{_dash(x['log_end_offset']):>12} {_dash(x['lag']):>10}  {_dash(x['member'])}")
        if r["members"] is None:
            print(f"{r['group']:24} members: -")
        elif not r["members"]:
            print(f"{r['group']:24} members: none alive")
        for m in r["members"] or ():
            assigned = ",".join(f"{t}-{p}" for t, p in m["assignment"]) or "-"
            print(f"{r['group']:24} member {m['member_id']} client_id={_dash(m['client_id'])} "
                  f"pid={_dash(m['pid'])} assignment={assigned}")
    return 0


def _dash(v) -> str:
    return "-" if v is None else str(v)


def _open_raw(path: Path):
    f = open(path, "rb")
    size = os.fstat(f.fileno()).st_size
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    f.close()
    return mm


def _walk_log(path: Path):
    """Yield (position, batch or None, problem or None) over a .log file, stopping at the first problem."""
    from ._engine.batch import RecordBatch
    data = _open_raw(path)
    n = len(data)
    pos = 0
    while pos < n:
        if not any(data[pos:pos + 61]):  # a zero header: the preallocated room of a preallocate=true segment
            yield pos, None, None
            return
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
        if batch is None and problem is None:
            print(f"position: {pos} preallocated zeros to the end of the file")
            break
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
              f"isControl: {batch.is_control} deleteHorizonMs: "
              f"{f'OptionalLong[{batch.base_timestamp}]' if batch.attributes & 0x40 else 'OptionalLong.empty'} "
              f"position: {pos} {ttype}: {batch.max_timestamp} "
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


def check_partition_dir(d: Path, notes: list[str] | None = None) -> list[str]:
    """Every problem found in one partition directory, each naming file and position. What is not corruption goes
    to ``notes``: a gap between segments (offsets with no records, kept as Kafka keeps a compacted log's), and an
    incomplete batch at the end of the last segment (being written now, or torn by a writer that died: the next
    writer or recovery cuts it)."""
    problems = []
    notes = [] if notes is None else notes
    for p in sorted(d.iterdir()):
        if p.name.endswith(".log.swap"):
            notes.append(f"{p}: a cleaned segment swapped in by a cleaner that stopped before the rename: the next "
                         f"writer to open the partition finishes the swap")
        elif p.name.endswith(".log.cleaned"):
            notes.append(f"{p}: a cleaned segment not swapped in (a cleaner stopped or is running): ignored, removed "
                         f"by the next recovery")
    logs = sorted(p for p in d.iterdir() if p.suffix == ".log" and p.name[:20].isdigit())
    prev_next = None
    for i, log in enumerate(logs):
        base = int(log.name[:20])
        if prev_next is not None and base < prev_next:
            problems.append(f"{log}: segment starts at offset {base} but the previous one ends at {prev_next - 1} "
                            f"(overlap)")
        elif prev_next is not None and base > prev_next:
            notes.append(f"{log}: no records in offsets [{prev_next}, {base}) (a gap between segments)")
        batch_at = {}
        max_ts = -1
        for pos, batch, problem in _walk_log(log):
            if batch is None and problem is None:  # preallocated zeros (trimmed at roll: the active segment's only)
                if i < len(logs) - 1:
                    notes.append(f"{log}: position {pos}: zeros to the end of a sealed segment (preallocated room a "
                                 f"roll did not trim)")
                break
            if problem:
                if batch is None and i == len(logs) - 1 and not problem.startswith("illegal"):
                    notes.append(f"{log}: position {pos}: {problem}: an incomplete batch at the log end")
                else:
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
    problems, notes = [], []
    nseg = 0
    for d in dirs:
        nseg += sum(1 for p in d.iterdir() if p.suffix == ".log")
        problems += check_partition_dir(d, notes)
    for p in problems:
        print(f"CORRUPT {p}")
    if not problems:
        print(f"ok: {len(dirs)} partition dir(s), {nseg} segment(s), every batch CRC-valid, indexes consistent")
    for n in notes:
        print(f"note: {n}")
    return EXIT_ERROR if problems else 0


DEMO_MARKER = ".kafkalog-demo"


def cmd_demo(args) -> int:
    """The README's first command: a durable local log, a time seek and a delete-before, end to end."""
    from .storage import LogStore
    from .storage.files import make_durable_dir
    path = Path(args.dir)
    marker = path / DEMO_MARKER
    # the demo appends and deletes records: only in a new directory or one an earlier demo made, never in user data
    if path.exists() and not marker.exists() and (not path.is_dir() or any(path.iterdir())):
        return _fail(f"refusing to run the demo in {path}: it is not empty and not a directory the demo made (the "
                     f"demo appends and deletes records); give it a new directory")
    make_durable_dir(path)
    marker.touch()
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


def read_properties(path) -> dict[str, str]:
    """A Java .properties file as Kafka's server.properties uses it: key=value (or key: value) lines, # and !
    comments, trailing backslash continuations."""
    out: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"--config {path}: {e.strerror or e}") from None
    pending = ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise UsageError(f"--config {path}:{n}: expected key=value, got {raw.strip()!r}")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def cmd_serve(args) -> int:
    """Run the broker facade until SIGTERM/SIGINT (a clean shutdown: the clean-shutdown marker is written)."""
    import asyncio
    import logging
    import signal

    from .broker.server import Broker, new_event_loop
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    props = read_properties(args.config) if args.config else {}
    for kv in args.override or ():
        key, sep, value = kv.partition("=")
        if not sep:
            raise UsageError(f"--override {kv!r}: expected KEY=VALUE")
        props[key.strip()] = value.strip()
    data_dir = args.data_dir or props.get("log.dirs", props.get("log.dir", "")).split(",")[0]
    if not data_dir:
        raise UsageError("no data dir: give --data-dir or log.dirs in --config")
    listen = args.listen
    if listen is None and "listeners" not in props:
        listen = "127.0.0.1:9092"
    broker = Broker(data_dir, listen, props, metrics=args.metrics)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)

    async def run():
        await broker.start_async()

        async def stop():
            try:
                await broker.stop_async()
            except Exception:  # noqa: BLE001  (kept in broker.shutdown_error, reported below)
                pass

        # before the ready line: a supervisor may signal as soon as it reads it
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: loop.create_task(stop()))
        if args.parent_pid:
            _stop_with_parent(loop, args.parent_pid, lambda: loop.create_task(stop()))
        if args.control_stdin:
            _control_stdin(loop, broker, lambda: loop.create_task(stop()))
        print(f"kafkalog broker listening on {broker.host}:{broker.port}", flush=True)
        if broker.metrics is not None:
            print(f"kafkalog metrics on http://{broker.metrics_listen[0]}:{broker.metrics_port}/metrics", flush=True)
        await broker.serve_forever()

    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    if broker.shutdown_error is not None:
        return _fail(f"broker stopped, but its shutdown failed: {broker.shutdown_error}")
    print("kafkalog broker stopped (clean shutdown)", file=sys.stderr, flush=True)
    return 0


def _stop_with_parent(loop, pid: int, stop) -> None:
    """--parent-pid: stop cleanly once process ``pid`` has exited, however it went (SIGKILL included): a broker a test
    run started never outlives it. Linux: a pidfd the loop watches; elsewhere the parent pid is looked at every
    100 ms."""
    import os
    if os.getppid() != pid and not _alive(pid):
        stop()
        return
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        def gone():
            loop.remove_reader(fd)
            os.close(fd)
            stop()
        loop.add_reader(fd, gone)
        return

    def look():
        if os.getppid() != pid and not _alive(pid):
            stop()
        else:
            loop.call_later(0.1, look)
    loop.call_later(0.1, look)


def _alive(pid: int) -> bool:
    import os
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _control_stdin(loop, broker, stop) -> None:
    """--control-stdin: fault-injection commands for tests, one JSON object a line on stdin, each answered by one
    JSON line on stdout (``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``); end of input stops the broker
    (the process that drives it is gone). Commands: ``{"op": "fail_produce", "topic": T, "error": CODE_OR_NAME,
    "count": N, "partition": P}``, ``{"op": "stall", "topic": T, "partition": P}``, ``{"op": "resume", "topic": T,
    "partition": P}`` (both optional), ``{"op": "clear"}``, ``{"op": "status"}``."""
    import json
    import threading

    def answer(obj) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def apply(line: str) -> None:
        try:
            cmd = json.loads(line)
            op = cmd.pop("op")
            faults = broker.faults
            if op == "fail_produce":
                faults.fail_produce(cmd["topic"], cmd["error"], cmd.get("count", 1), cmd.get("partition"))
            elif op == "stall":
                faults.stall(cmd["topic"], cmd.get("partition", 0))
            elif op == "resume":
                faults.resume(cmd.get("topic"), cmd.get("partition"))
            elif op == "clear":
                faults.clear()
            elif op != "status":
                raise ValueError(f"unknown op {op!r}")
            answer({"ok": True, "injected": faults.injected, "pending": faults.pending()})
        except (ValueError, TypeError, KeyError) as e:
            answer({"ok": False, "error": f"{type(e).__name__}: {e}"})

    def read() -> None:  # a daemon thread: the loop never blocks on stdin
        for line in sys.stdin:
            if line.strip():
                loop.call_soon_threadsafe(apply, line)
        loop.call_soon_threadsafe(stop)

    threading.Thread(target=read, name="kafkalog-control-stdin", daemon=True).start()


def cmd_quotas(args) -> int:
    """Client quotas of a running broker (DescribeClientQuotas / AlterClientQuotas over the wire)."""
    from .broker import tools
    from .broker.quotas import FETCH, PRODUCE, parse_rate
    changes = []
    for key, value in ((PRODUCE, args.producer_byte_rate), (FETCH, args.consumer_byte_rate)):
        if value is not None:
            changes.append((key, None if value.lower() in ("none", "remove", "-") else parse_rate(value, key)))
    if changes:
        if args.client_id is None and not args.default:
            raise UsageError("give --client-id ID or --default for the quota to change")
        cid = None if args.default else args.client_id
        for key, rate in changes:
            tools.alter_quota(args.bootstrap_server, cid, key, rate)
            who = "every client (default)" if cid is None else f"client id {cid!r}"
            print(f"{key} for {who}: {'removed' if rate is None else f'{rate:.0f} bytes/s'}")
        return 0
    rows = tools.describe_quotas(args.bootstrap_server)
    if args.json:
        print(json.dumps([{"client_id": c, "key": k, "value": v} for c, k, v in rows]))
    else:
        for c, k, v in rows:
            print(f"{'<default>' if c is None else c}\t{k}\t{v:.0f}")
    return 0


def cmd_users(args) -> int:
    from .broker import security
    users, _ = security.default_paths(args.data_dir)
    return security.users_main(args.rest, users)


def cmd_acls(args) -> int:
    from .broker import security
    _, acls = security.default_paths(args.data_dir)
    return security.acls_main(args.rest, acls)


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

    p = sub.add_parser("delete-records", help="advance log start offsets (KIP-107): by offset or by time")
    p.add_argument("data_dir")
    p.add_argument("topic")
    p.add_argument("--partition", type=int, help="only this partition (default: every partition of the topic)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--before", "--offset", dest="before", type=int, metavar="OFFSET",
                   help="delete records below OFFSET (-1 = high watermark); --offset is an alias")
    g.add_argument("--before-time", metavar="T", help="delete records with timestamp < T (epoch ms or ISO-8601)")
    p.set_defaults(func=cmd_delete_records)

    p = sub.add_parser("produce", help="stdin lines -> records (fsynced at the end)")
    p.add_argument("data_dir")
    p.add_argument("topic")
    p.add_argument("--key-separator", metavar="SEP", help="split each line at the first SEP into key and value")
    p.add_argument("--partition", type=int, help="write every record to this partition (default: Kafka's "
                   "partitioner: murmur2 of the key, sticky for unkeyed records)")
    p.add_argument("--compression", choices=COMPRESSIONS, default="none")
    p.add_argument("--create", action="store_true", help="create the topic when it does not exist")
    p.add_argument("--partitions", type=int, default=1, help="partitions of a topic made by --create (default 1)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line and no summary")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", help="records -> stdout, one per line")
    p.add_argument("data_dir")
    p.add_argument("topic")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from-beginning", action="store_true",
                   help="start at the log start where the group has no committed offset (default: the log end)")
    g.add_argument("--offset", type=_offset_arg, metavar="N", help="start at offset N (or earliest/latest); needs "
                   "--partition")
    g.add_argument("--from-time", metavar="T", help="start at the first record with timestamp >= T (epoch ms or "
                   "ISO-8601)")
    p.add_argument("--partition", type=int, help="only this partition (default: every partition)")
    p.add_argument("--group", metavar="G", help="start from G's committed offsets and commit positions")
    p.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
                   help="read_committed: only committed transactions' records, up to the last stable offset "
                   "(default read_uncommitted, as Kafka)")
    p.add_argument("--follow", "-f", action="store_true", help="keep waiting for new records (until SIGINT/SIGTERM)")
    p.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE (SEP: --key-separator, tab)")
    p.add_argument("--key-separator", metavar="SEP", help="separator for --print-key (implies it)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--base64", action="store_true", help="--format json: bytes as base64 (default UTF-8 text with "
                   "\\xNN for invalid bytes)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line and no summary")
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("groups", help="consumer groups: committed offsets, lag, members")
    p.add_argument("data_dir")
    p.add_argument("group", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_groups)

    p = sub.add_parser("dump", help="print batches, records (--deep) and index entries")
    p.add_argument("path")
    p.add_argument("--deep", action="store_true", help="also print every record")
    p.add_argument("--max-records", type=int)
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("check", help="verify CRCs and index consistency")
    p.add_argument("data_dir")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("serve", help="a Kafka-compatible broker over a data dir (Kafka clients unchanged)")
    p.add_argument("--data-dir", help="the data dir (default: log.dirs of --config)")
    p.add_argument("--listen", metavar="HOST:PORT", help="listen address; port 0 picks a free port and prints it "
                   "(default: listeners of --config, else 127.0.0.1:9092)")
    p.add_argument("--config", metavar="FILE", help="a Kafka server.properties (listeners, log.dirs, num.partitions, "
                   "auto.create.topics.enable, log.segment.bytes, log.retention.ms, message.max.bytes, ...)")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="a server.properties key (repeatable)")
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics at http://HOST:PORT/metrics")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    p.add_argument("--parent-pid", type=int, metavar="PID", help="stop cleanly when process PID exits (a test run "
                   "or supervisor that started the broker: it never outlives it)")
    p.add_argument("--control-stdin", action="store_true", help="fault-injection commands for tests as JSON lines on "
                   "stdin, answered on stdout; end of stdin stops the broker")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("quotas", help="client quotas of a running broker: list, or set with --producer-byte-rate/"
                       "--consumer-byte-rate (bytes/s, 500K, 2M; 'none' removes)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--client-id", metavar="ID", help="the client id whose quota changes ('' = clients without an id)")
    g.add_argument("--default", action="store_true", help="change the default quota of every client id")
    p.add_argument("--producer-byte-rate", metavar="RATE")
    p.add_argument("--consumer-byte-rate", metavar="RATE")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_quotas)

    p = sub.add_parser("users", help="SASL/SCRAM users of the broker: add NAME | remove NAME | list",
                       add_help=False)
    p.add_argument("data_dir")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_users)

    p = sub.add_parser("acls", help="the broker's ACLs (kafka-acls.sh flags: --add/--remove/--list ...)",
                       add_help=False)
    p.add_argument("data_dir")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_acls)
    return ap


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        return _fail(str(e), EXIT_USAGE)
    except BrokenPipeError:
        # the reader went away (| head): not an error; keep the interpreter from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KafkaError as e:
        return _fail(str(e))
    except (OSError, ValueError) as e:
        return _fail(str(e))
    except ImportError as e:  # an optional extra that is not installed (the message names it)
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130
