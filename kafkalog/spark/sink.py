"""Spark's Kafka sink over a kafkalog data directory: executors stage, the driver publishes; exactly once for streams.

Input columns, as Spark's Kafka sink takes them (other columns are ignored)::

    value      string | binary                          required
    key        string | binary                          optional; null -> unkeyed
    topic      string                                   unless option "topic" (which wins)
    partition  int                                      optional; null or absent -> the embedded producer's choice
    headers    array<struct<key: string, value: binary>> optional

Files under the data directory (``<path>/.kafkalog-spark/``)::

    staging/<sink>/<batch>/<topic>-<partition>.p<task>.a<attempt>.<uuid>.stage   record batches v2, base offset 0
    sinks/<sink>.json     {"version": 1, "committed": <last published batch id>, "pending": null | Pending}
    sinks/<sink>.lock     one publisher per sink at a time
    Pending => {"batch": id, "producer_id": P, "files": [[topic, partition, name, records, batches]...],
                "from": {"<topic> <partition>": log end offset before publishing}}

A streaming micro-batch is published once: each staged batch carries the sink's producer id P (a 63-bit hash of the
sink id, beside the small ids a broker hands out) and BaseSequence = the micro-batch id. The driver writes Pending
(atomically, fsynced), appends each partition's staged files in order, fsyncs the logs, then records
``committed`` and drops Pending. A replayed micro-batch id <= committed is skipped; a publish interrupted by a crash
is finished from Pending's own files on the next commit, counting the stamped batches already in each log (scanning
from Pending's "from" offsets) so that none is appended twice. Tasks stage only: a failed or aborted task's records
never reach a log, and its staging files are deleted by the task, by abort(), or by the next commit of the sink.

The sink id is option ``sinkId``, else the streaming query's id (stable across restarts from one checkpoint). Batch
writes (``df.write``) stage the same way under a write id and publish in commit(); they have no batch id to replay,
so a driver crash during commit() may leave some partitions published (at-least-once on retry, like Kafka's sink).

Process safety: publishing holds the sink's file lock and appends through a shared LogStore, so other writers
(producers, other sinks) may append to the same topics meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import uuid
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from .._engine.batch import build_batch, iter_batches
from ..client.partitioner import murmur2
from ..errors import (
    IllegalStateError,
    InvalidConfigError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    storage_error,
)
from ..storage import LogStore
from ..storage.files import FileLock, atomic_write, fsync_dir
from .datadir import require_data_dir

_log = logging.getLogger("kafkalog.spark")

STATE_DIR = ".kafkalog-spark"
INT32_MAX = 2**31 - 1
_RECORD_OVERHEAD = 22  # a record's length, attributes, deltas and key/value lengths as varints, at most
_BATCH_OVERHEAD = 61
_LOCK_TIMEOUT_S = 120.0  # another publisher of the same sink (a second run of one checkpoint): fail, never hang


def producer_id_for(sink_id: str) -> int:
    """The producer id stamped on a sink's batches: bit 62 set, so never one a broker hands out (1, 2, ...)."""
    h = int.from_bytes(hashlib.sha256(sink_id.encode()).digest()[:8], "big")
    return (1 << 62) | (h & ((1 << 62) - 1))


@dataclass
class StagedFiles(WriterCommitMessage):
    """What one task staged: [(topic, partition, file name, records, batches)], in the order they must be
    appended."""

    sink: str
    batch_id: int
    files: list = field(default_factory=list)
    records: int = 0


@dataclass(frozen=True)
class Layout:
    """Which sink columns the DataFrame has (checked on the driver when the write is planned)."""

    key: bool
    topic: bool
    partition: bool
    headers: bool


def check_write_schema(schema: StructType, topic_option: str | None) -> Layout:
    """Spark's KafkaWriter.validateQuery, in its words."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise InvalidConfigError("Required attribute 'value' not found")
    if not isinstance(types["value"], (StringType, BinaryType)):
        raise InvalidConfigError(f"value attribute type must be a string or binary, got "
                                 f"{types['value'].simpleString()}")
    if "key" in types and not isinstance(types["key"], (StringType, BinaryType)):
        raise InvalidConfigError(f"key attribute type must be a string or binary, got {types['key'].simpleString()}")
    if topic_option is None and "topic" not in types:
        raise InvalidConfigError("topic option required when no 'topic' attribute is present. Use the topic option "
                                 "for setting a topic.")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise InvalidConfigError(f"topic attribute type must be a string, got {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise InvalidConfigError(f"partition attribute type must be an int, got "
                                 f"{types['partition'].simpleString()}")
    if "headers" in types:
        h = types["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise InvalidConfigError(f"headers attribute type must be array<struct<key:string,value:binary>>, got "
                                     f"{h.simpleString()}")
    return Layout(key="key" in types, topic="topic" in types and topic_option is None,
                  partition="partition" in types, headers="headers" in types)


# ---------------------------------------------------------------------------------------------------- executors


def _as_bytes_list(col: pa.Array) -> list:
    if pa.types.is_string(col.type):
        col = col.view(pa.binary())
    elif pa.types.is_large_string(col.type):
        col = col.view(pa.large_binary())
    return col.to_pylist()


class _TopicInfo:
    """Partition counts and batch size limits of the topics one task writes to (a missing topic is created, as
    with auto.create.topics.enable)."""

    def __init__(self, path: str):
        self.path = path
        self.store = None
        self.info: dict[str, tuple[int, int]] = {}

    def get(self, topic: str) -> tuple[int, int]:
        got = self.info.get(topic)
        if got is None:
            got = self.info[topic] = self._load(topic)
        return got

    def _load(self, topic: str) -> tuple[int, int]:
        if self.store is None and Path(self.path).is_dir():
            self.store = LogStore(self.path, read_only=True)
        try:
            if self.store is None:
                raise UnknownTopicOrPartitionError(topic)
            n = self.store.partitions_for(topic)
        except UnknownTopicOrPartitionError:
            with LogStore(self.path, maintenance=False) as writer:
                try:
                    writer.create_topic(topic)
                except TopicAlreadyExistsError:
                    pass
            if self.store is None:
                self.store = LogStore(self.path, read_only=True)
            n = self.store.partitions_for(topic)
        limit = self.store.topic_config(topic)["max.message.bytes"]
        return n, limit

    def close(self):
        if self.store is not None:
            self.store.close()


class _Stager:
    """One task's staging: one file per (topic, partition), record batches appended as they are built."""

    def __init__(self, path: str, sink: str, batch_id: int, stamp: tuple[int, int, int]):
        self.dir = Path(path) / STATE_DIR / "staging" / sink / str(batch_id)
        self.sink, self.batch_id, self.stamp = sink, batch_id, stamp
        ctx = TaskContext.get()
        self.task = f"p{ctx.partitionId()}.a{ctx.attemptNumber()}" if ctx is not None else "p0.a0"
        self.token = uuid.uuid4().hex[:12]
        self.files: dict[tuple[str, int], list] = {}  # tp -> [name, fd, records, batches]

    def add(self, topic: str, partition: int, data: bytes, records: int) -> None:
        entry = self.files.get((topic, partition))
        try:
            if entry is None:
                self.dir.mkdir(parents=True, exist_ok=True)
                name = f"{topic}-{partition}.{self.task}.{self.token}.stage"
                fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                entry = self.files[(topic, partition)] = [name, fd, 0, 0]
            view = memoryview(data)
            while view:
                view = view[os.write(entry[1], view):]
        except OSError as e:
            raise storage_error(e, "stage", self.dir) from None
        entry[2] += records
        entry[3] += 1

    def finish(self) -> StagedFiles:
        out = []
        for (topic, partition), (name, fd, records, batches) in sorted(self.files.items()):
            try:
                os.fsync(fd)
            except OSError as e:
                raise storage_error(e, "fsync", self.dir / name) from None
            os.close(fd)
            self.files[(topic, partition)][1] = -1
            out.append([topic, partition, name, records, batches])
        if out:
            fsync_dir(self.dir)
        return StagedFiles(self.sink, self.batch_id, out, sum(f[3] for f in out))

    def discard(self) -> None:
        for name, fd, _, _ in self.files.values():
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(self.dir / name)
            except FileNotFoundError:
                pass


def _cuts(sizes: np.ndarray, limit: int):
    """Cut consecutive records into runs whose batch stays within ``limit`` bytes (a record alone may exceed it:
    the log then refuses it, naming max.message.bytes)."""
    ends = np.cumsum(sizes)
    lo, n, done = 0, len(sizes), 0
    while lo < n:
        hi = int(np.searchsorted(ends, done + limit - _BATCH_OVERHEAD, side="right"))
        hi = max(hi, lo + 1)
        yield lo, hi
        done = int(ends[hi - 1])
        lo = hi


def _take(seq, rows: list):
    return itemgetter(*rows)(seq) if len(rows) > 1 else (seq[rows[0]],)


def _lengths(col: pa.Array) -> np.ndarray:
    return pc.fill_null(pc.binary_length(col), 0).to_numpy().astype(np.int64)


def _partitions(idx: np.ndarray, keys, explicit, count: int, topic: str, sticky: dict) -> np.ndarray:
    """The embedded producer's choice for records ``idx`` of one topic: the partition column where it is set, else
    murmur2 of the key, else one random partition for the unkeyed records of this input batch (KIP-480)."""
    parts = explicit[idx] if explicit is not None else np.full(len(idx), -1, dtype=np.int64)
    bad = (parts >= count) | (parts < -1)
    if bad.any():
        raise UnknownTopicOrPartitionError(f"partition {int(parts[bad][0])} of topic {topic!r} does not exist "
                                           f"({count} partitions)")
    todo = np.flatnonzero(parts < 0)
    if len(todo):
        chosen = np.empty(len(todo), dtype=np.int64)
        for j, i in enumerate(idx[todo].tolist()):
            k = keys[i] if keys is not None else None
            if k is not None:
                chosen[j] = (murmur2(k) & 0x7FFFFFFF) % count
            else:
                p = sticky.get(topic)
                if p is None:
                    p = sticky[topic] = random.randrange(count)
                chosen[j] = p
        parts[todo] = chosen
    return parts


def stage_task(path: str, layout: Layout, topic_option: str | None, sink: str, batch_id: int,
               stamp: tuple[int, int, int], batches) -> StagedFiles:
    """Executor side of a write: partition each record as the embedded producer would, encode record batches
    (stamped with the sink's producer id and sequence) and stage them. Nothing is visible until the driver
    publishes; on any error this task's staging files are deleted before the error goes on."""
    require_data_dir(path, "write to it")
    stager = _Stager(path, sink, batch_id, stamp)
    topics = _TopicInfo(path)
    pid, epoch, seq = stamp
    try:
        for rb in batches:
            n = rb.num_rows
            if n == 0:
                continue
            cols = dict(zip(rb.schema.names, rb.columns))
            values = _as_bytes_list(cols["value"])
            sizes = _lengths(cols["value"]) + _RECORD_OVERHEAD
            keys = None
            if layout.key:
                keys = _as_bytes_list(cols["key"])
                sizes += _lengths(cols["key"])
            headers = None
            if layout.headers:
                headers = [None if h is None else [(e["key"], e["value"]) for e in h]
                           for h in cols["headers"].to_pylist()]
                sizes += np.array([sum(len(k.encode()) + len(v or b"") + 10 for k, v in h) if h else 0
                                   for h in headers], dtype=np.int64)
            explicit = None
            if layout.partition:
                explicit = pc.fill_null(cols["partition"], -1).to_numpy().astype(np.int64)
            if layout.topic:
                by_topic: dict = {}
                for i, t in enumerate(cols["topic"].to_pylist()):
                    if t is None:
                        raise InvalidConfigError("Null topic present in the data. Use the topic option for setting "
                                                 "a topic.")
                    by_topic.setdefault(t, []).append(i)
                groups = [(t, np.array(ix, dtype=np.int64)) for t, ix in by_topic.items()]
            else:
                groups = [(topic_option, np.arange(n, dtype=np.int64))]
            sticky: dict[str, int] = {}
            for topic, idx in groups:
                count, limit = topics.get(topic)
                parts = _partitions(idx, keys, explicit, count, topic, sticky)
                order = np.argsort(parts, kind="stable")
                ordered, sorted_parts = idx[order], parts[order]
                cut = (np.flatnonzero(np.diff(sorted_parts)) + 1).tolist()
                for a, b in zip([0, *cut], [*cut, len(ordered)]):
                    p, run = int(sorted_parts[a]), ordered[a:b]
                    for lo, hi in _cuts(sizes[run], limit):
                        rows = run[lo:hi].tolist()
                        data = build_batch(_take(values, rows), None if keys is None else _take(keys, rows), None,
                                           None if headers is None else _take(headers, rows),
                                           producer_id=pid, producer_epoch=epoch, base_sequence=seq)
                        stager.add(topic, p, data, len(rows))
        return stager.finish()
    except BaseException:
        stager.discard()
        raise
    finally:
        topics.close()


# ---------------------------------------------------------------------------------------------------- driver


def _state_paths(path: str, sink: str) -> tuple[Path, Path, Path]:
    root = Path(path) / STATE_DIR
    return root / "sinks" / f"{sink}.json", root / "sinks" / f"{sink}.lock", root / "staging" / sink


def _load_state(p: Path) -> dict:
    try:
        state = json.loads(p.read_text())
    except FileNotFoundError:
        return {"version": 1, "committed": -1, "pending": None}
    except (OSError, ValueError) as e:
        raise IllegalStateError(f"unreadable sink state {p}: {e}") from None
    return state


def _save_state(p: Path, state: dict) -> None:
    atomic_write(p, json.dumps(state, sort_keys=True).encode())


def sink_state(path: str, sink: str) -> dict:
    """The sink's record of what it published: {"committed": last micro-batch id, "pending": ...}."""
    return _load_state(_state_paths(path, sink)[0])


def _files_by_partition(files) -> dict:
    out: dict[tuple[str, int], list] = {}
    for f in sorted(files, key=lambda f: (f[0], f[1], f[2])):
        out.setdefault((f[0], f[1]), []).append(f)
    return out


def _stamped_batches(log, start: int, pid: int, seq: int) -> int:
    """How many batches with this producer id and base sequence the log holds from offset ``start`` on."""
    pos = max(start, log.log_start_offset)
    end = log.log_end_offset
    found = 0
    while pos < end:
        view = log.read(pos, 1 << 20)
        if not len(view):
            break
        nxt = pos
        for batch in iter_batches(view):
            if batch.next_offset > pos and batch.producer_id == pid and batch.base_sequence == seq:
                found += 1
            nxt = batch.next_offset
        del view
        if nxt <= pos:
            break
        pos = nxt
    return found


def _append_files(store, staging: Path, tp, files, skip_batches: int = 0) -> None:
    log = store.log(*tp)
    for f in files:
        try:
            data = (staging / f[2]).read_bytes()
        except FileNotFoundError:
            raise IllegalStateError(f"staged file {staging / f[2]} of {tp[0]}-{tp[1]} is missing: the sink cannot "
                                    "publish this micro-batch") from None
        if skip_batches:
            if skip_batches >= f[4]:
                skip_batches -= f[4]
                continue
            pos = 0
            for i, batch in enumerate(iter_batches(data)):
                if i == skip_batches:
                    break
                pos = batch.position + batch.size_in_bytes
            data = data[pos:]
            skip_batches = 0
        if data:
            log.append_records(data)
    log.flush()


def _publish_pending(store, staging_root: Path, pending: dict) -> None:
    """Append what a (possibly interrupted) publish has not appended yet: per partition, the staged batches past the
    stamped ones already in the log."""
    batch_dir = staging_root / str(pending["batch"])
    pid, seq = pending["producer_id"], pending["batch"] & INT32_MAX
    for tp, files in _files_by_partition(pending["files"]).items():
        start = pending["from"].get(f"{tp[0]} {tp[1]}", 0)
        expected = sum(f[4] for f in files)
        done = _stamped_batches(store.log(*tp), start, pid, seq) if pending.get("resumed") else 0
        if done >= expected:
            continue
        _append_files(store, batch_dir, tp, files, skip_batches=done)


def _sweep(staging_root: Path, upto: int, keep: set | None = None) -> None:
    """Remove staging of micro-batches <= upto (leftovers of failed attempts included)."""
    try:
        names = os.listdir(staging_root)
    except FileNotFoundError:
        return
    for name in names:
        if name.isdigit() and int(name) <= upto and (keep is None or int(name) not in keep):
            shutil.rmtree(staging_root / name, ignore_errors=True)


def publish_stream_batch(path: str, sink: str, batch_id: int, messages) -> str:
    """Driver side of a streaming micro-batch: publish it once. Returns "published" or "skipped"."""
    state_path, lock_path, staging_root = _state_paths(path, sink)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path)
    lock.acquire(timeout=_LOCK_TIMEOUT_S, what=f"publish micro-batch {batch_id} of sink {sink}")
    try:
        store = LogStore(path, maintenance=False)
        try:
            state = _load_state(state_path)
            pending = state.get("pending")
            if pending is not None:
                _log.warning("sink %s: finishing micro-batch %d, interrupted while publishing", sink, pending["batch"])
                pending["resumed"] = True
                _publish_pending(store, staging_root, pending)
                state = {"version": 1, "committed": max(state["committed"], pending["batch"]), "pending": None}
                _save_state(state_path, state)
            if batch_id <= state["committed"]:
                result = "skipped"
            else:
                files = [f for m in messages if m is not None for f in m.files]
                tps = _files_by_partition(files)
                pending = {"batch": batch_id, "producer_id": producer_id_for(sink), "files": files,
                           "from": {f"{t} {p}": store.log(t, p).log_end_offset for t, p in tps}}
                if files:
                    _save_state(state_path, dict(state, pending=pending))
                    _publish_pending(store, staging_root, pending)
                _save_state(state_path, {"version": 1, "committed": batch_id, "pending": None})
                result = "published"
            _sweep(staging_root, batch_id)
            return result
        finally:
            store.close()
    finally:
        lock.release()
        lock.close()


def abort_stream_batch(path: str, sink: str, batch_id: int) -> None:
    """Drop a failed micro-batch's staging (files a pending publish still needs are kept)."""
    state_path, lock_path, staging_root = _state_paths(path, sink)
    if not staging_root.exists():
        return
    lock = FileLock(lock_path)
    lock.acquire(timeout=_LOCK_TIMEOUT_S, what=f"abort micro-batch {batch_id} of sink {sink}")
    try:
        pending = _load_state(state_path).get("pending")
        if pending is None or pending["batch"] != batch_id:
            shutil.rmtree(staging_root / str(batch_id), ignore_errors=True)
    finally:
        lock.release()
        lock.close()


def publish_write(path: str, write_id: str, messages) -> None:
    """Driver side of a batch write: append every staged file, partition by partition, then drop the staging."""
    staging = Path(path) / STATE_DIR / "staging" / write_id
    files = [f for m in messages if m is not None for f in m.files]
    try:
        if files:
            with LogStore(path, maintenance=False) as store:
                for tp, group in _files_by_partition(files).items():
                    _append_files(store, staging / "0", tp, group)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _query_id(checkpoint: str | None) -> str | None:
    if not checkpoint:
        return None
    for prefix in ("file://", "file:"):
        if checkpoint.startswith(prefix):
            checkpoint = checkpoint[len(prefix):]
            break
    try:
        return json.loads((Path(checkpoint) / "metadata").read_text().splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------------- writers


class KafkaLogWriter(DataSourceArrowWriter):
    """``df.write.format("kafkalog").mode("append")``: staged by the tasks, published by commit(). Pickled to the
    tasks and to commit()/abort() with the write id it got on the driver."""

    def __init__(self, options, layout: Layout):
        self.options = options
        self.layout = layout
        self.write_id = "write-" + uuid.uuid4().hex  # set on the driver: the tasks and commit() see the same one

    def write(self, iterator) -> StagedFiles:
        return stage_task(self.options.path, self.layout, self.options.topic, self.write_id, 0, (-1, -1, -1),
                          iterator)

    def commit(self, messages) -> None:
        publish_write(self.options.path, self.write_id, messages)

    def abort(self, messages) -> None:
        shutil.rmtree(Path(self.options.path) / STATE_DIR / "staging" / self.write_id, ignore_errors=True)


class KafkaLogStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("kafkalog")``: each micro-batch is published exactly once (see the module docstring).
    Spark makes a fresh instance for every commit()/abort(): what a micro-batch needs travels in the messages."""

    def __init__(self, options, layout: Layout):
        self.options = options
        self.layout = layout

    def write(self, iterator) -> StagedFiles:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        sink = self.options.sink_id or ctx.getLocalProperty("sql.streaming.queryId")
        stamp = (producer_id_for(sink), 0, batch_id & INT32_MAX)
        return stage_task(self.options.path, self.layout, self.options.topic, sink, batch_id, stamp, iterator)

    def _sink(self, messages) -> str | None:
        if self.options.sink_id:
            return self.options.sink_id
        for m in messages:
            if m is not None:
                return m.sink
        return _query_id(self.options.checkpoint_location)

    def commit(self, messages, batchId: int) -> None:
        sink = self._sink(messages)
        if sink is None:
            return  # no task ran and the query's id is unknown: nothing was staged
        result = publish_stream_batch(self.options.path, sink, batchId, messages)
        if result == "skipped":
            _log.info("sink %s: micro-batch %d was published before: skipped", sink, batchId)

    def abort(self, messages, batchId: int) -> None:
        sink = self._sink(messages)
        if sink is not None:
            abort_stream_batch(self.options.path, sink, batchId)
