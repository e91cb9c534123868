"""``format("kafkalog")``: Spark's Python data source over a kafkalog data directory, with Spark's Kafka options.

Where each piece runs (pyspark 4.2+ Python data source API)::

    KafkaLogDataSource.schema / reader / streamReader / writer   driver-side Python worker, at load() and planning
    KafkaLogBatchReader.__init__ / partitions                     driver side: offsets resolved, ranges planned
    KafkaLogStreamReader.latestOffset / partitions / ...          one long-lived driver-side worker per query
    *.read(range)                                                 executor task: opens the log read-only by path

Readers and writers are pickled between those processes, so they hold only plain data (options, resolved offsets)
and open the data directory inside each call. Executors read the log by path: Spark local mode, or a data
directory on storage every executor mounts; an executor without it fails its task at once, saying to use Spark's
Kafka source through the broker (``require_data_dir``).

Thread safety: Spark uses each object from one thread; nothing here is shared between threads.
"""

from __future__ import annotations

import time

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import InvalidConfigError, UnknownTopicOrPartitionError
from ..storage import LogStore
from . import offsets as ofs
from .arrow import read_range
from .datadir import make_data_dir, require_data_dir
from .options import check_batch, check_stream, parse_read_options, parse_write_options

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (KafkaRecordToRowConverter), every field nullable."""
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
              StructField("partition", IntegerType()), StructField("offset", LongType()),
              StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def _check_schema(schema, include_headers: bool) -> StructType:
    expected = kafka_schema(include_headers)
    if schema is not None and schema != expected:
        raise InvalidConfigError("kafkalog source has a fixed schema and cannot be set with a custom one")
    return expected


class OffsetRange(InputPartition):
    """One Spark task: offsets [start, end) of one partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self):
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _read(o, schema: StructType, part):
    """Executor side: yield the range's Arrow record batches (an empty plan hands in a plain InputPartition)."""
    if not isinstance(part, OffsetRange) or part.end <= part.start:
        return
    pa_schema = to_arrow_schema(schema, timezone="UTC")
    require_data_dir(o.path, f"read {part.topic}-{part.partition}")
    store = LogStore(o.path, read_only=True)
    try:
        try:
            log = store.log(part.topic, part.partition)
        except UnknownTopicOrPartitionError:
            ofs.report_data_loss(f"{part.topic}-{part.partition} is gone: offsets [{part.start}, {part.end}) cannot "
                                 "be read", o.fail_on_data_loss)
            return
        yield from read_range(log, part.start, part.end, pa_schema, o.fail_on_data_loss,
                              read_committed=o.read_committed)
    finally:
        store.close()


class KafkaLogDataSource(DataSource):
    """Spark's Kafka source and sink, name for name, over a kafkalog data directory (option ``path``).

    Spark creates one per load()/save() and pickles it to its Python workers; it holds only the options."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> StructType:
        return kafka_schema(parse_read_options(self.options).include_headers)

    def reader(self, schema: StructType) -> KafkaLogBatchReader:
        o = parse_read_options(self.options)
        check_batch(o)
        return KafkaLogBatchReader(o, _check_schema(schema, o.include_headers))

    def streamReader(self, schema: StructType) -> KafkaLogStreamReader:
        o = parse_read_options(self.options)
        check_stream(o)
        return KafkaLogStreamReader(o, _check_schema(schema, o.include_headers))

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import KafkaLogWriter, check_write_schema
        if overwrite:
            raise InvalidConfigError("Save mode Overwrite is not allowed for kafkalog: records are appended to the "
                                     "log. Use .mode(\"append\").")
        o = parse_write_options(self.options)
        layout = check_write_schema(schema, o.topic)
        make_data_dir(o.path)
        return KafkaLogWriter(o, layout)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import KafkaLogStreamWriter, check_write_schema
        o = parse_write_options(self.options)
        layout = check_write_schema(schema, o.topic)
        make_data_dir(o.path)
        return KafkaLogStreamWriter(o, layout)


class KafkaLogBatchReader(DataSourceReader):
    """A batch read: offsets resolved once, at planning, on the driver. Pickled to the tasks (plain data only); each
    read() opens its own read-only view of the data directory."""

    def __init__(self, o, schema: StructType):
        self.o = o
        self.schema = schema
        with LogStore(o.path, read_only=True) as store:
            tps = ofs.subscribed(store, o)
            start = ofs.resolve_start(store, tps, o.starting, "earliest", o.no_match_latest, o.fail_on_data_loss,
                                      o.read_committed)
            end = ofs.resolve_end(store, tps, o.ending, o.read_committed)
        self.ranges = ofs.split_ranges(ofs.batch_ranges(start, end), o.min_partitions, o.max_records_per_partition)

    def partitions(self) -> list[InputPartition]:
        return [OffsetRange(*r) for r in self.ranges]

    def read(self, partition):
        return _read(self.o, self.schema, partition)


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read. Offsets live in Spark's checkpoint only (commit() is a hint Spark sends late, and never for
    an availableNow run's last batch), so ranges are a function of (start, end) and the log. Spark calls the
    driver-side instance from one thread of one long-lived worker; the tasks get a pickled copy for read()."""

    def __init__(self, o, schema: StructType):
        self.o = o
        self.schema = schema
        self._initial = None  # Spark asks twice on a first run: answer the same both times
        self._target = None  # availableNow: the log ends when the run started
        self._latest = None
        self._last_trigger_ms = 0.0

    def _store(self):
        return LogStore(self.o.path, read_only=True)

    def initialOffset(self) -> dict:
        if self._initial is None:
            o = self.o
            with self._store() as store:
                tps = ofs.subscribed(store, o)
                start = ofs.resolve_start(store, tps, o.starting, "latest", o.no_match_latest, o.fail_on_data_loss,
                                          o.read_committed)
            self._initial = ofs.to_json(start)
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        with self._store() as store:
            tps = ofs.subscribed(store, self.o)
            self._target = {tp: hi for tp, (_, hi) in ofs.log_bounds(store, tps, self.o.read_committed).items()}

    def getDefaultReadLimit(self):
        o = self.o
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        o = self.o
        begin = ofs.from_json(start)
        with self._store() as store:
            if self._target is not None:
                latest = dict(self._target)
            else:
                tps = ofs.subscribed(store, o)
                latest = {tp: hi for tp, (_, hi) in ofs.log_bounds(store, tps, o.read_committed).items()}
            new = [tp for tp in latest if tp not in begin]
            earliest = {tp: lo for tp, (lo, _) in ofs.log_bounds(store, new).items()} if new else {}
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return ofs.to_json(latest)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else o.min_offsets_per_trigger
        if min_rows is not None and self._target is None and self._delay(min_rows, begin, latest):
            return ofs.to_json(begin)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_offsets_per_trigger
        if max_rows is not None:
            return ofs.to_json(ofs.rate_limit(max_rows, begin, latest, earliest))
        return ofs.to_json(latest)

    def _delay(self, min_rows: int, begin: dict, latest: dict) -> bool:
        """minOffsetsPerTrigger / maxTriggerDelay: hold the batch back until enough records arrived or the delay
        passed since the last batch (the first batch is never held)."""
        now = time.time() * 1000
        if now - self._last_trigger_ms >= self.o.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        available = sum(end - begin.get(tp, 0) for tp, end in latest.items())
        if available < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self):
        return None if not self._latest else ofs.to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        o = self.o
        with self._store() as store:
            ranges = ofs.stream_ranges(store, ofs.from_json(start), ofs.from_json(end), o.fail_on_data_loss)
        return [OffsetRange(*r) for r in ofs.split_ranges(ranges, o.min_partitions, o.max_records_per_partition)]

    def read(self, partition):
        return _read(self.o, self.schema, partition)

    def commit(self, end: dict) -> None:
        pass  # offsets are Spark's checkpoint; nothing is kept or deleted on the log's side

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_latest"] = None
        return state
