"""Spark's Kafka source and sink options, name for name, parsed into plain picklable data (no pyspark here).

Option values as Spark's Kafka integration spells them (keys are case-insensitive)::

    assign                          {"topicA":[0,1],"topicB":[2,4]}
    subscribe                       topicA,topicB
    subscribePattern                topic.*            (Python re.fullmatch; Kafka uses a Java regex)
    startingOffsets/endingOffsets   earliest | latest | {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}
                                    (-2 = earliest, -1 = latest)
    startingTimestamp/endingTimestamp                  1700000000000      (ms, every partition)
    startingOffsetsByTimestamp/endingOffsetsByTimestamp {"topicA":{"0":1700000000000}}
    startingOffsetsByTimestampStrategy                 error | latest
    maxTriggerDelay                 15m                (Spark's time strings: us, ms, s, m, min, h, d; ms default)
    kafka.isolation.level           read_uncommitted | read_committed (the Kafka consumer option Spark passes
                                    on; read_committed: ranges end at the last stable offset, aborted
                                    transactions' records are dropped)

``kafka.bootstrap.servers`` is replaced by ``path`` (the data directory); it and every other ``kafka.*`` option
(but ``kafka.isolation.level``) and the consumer tuning options are accepted and ignored, except the ones Spark's
Kafka source rejects (with its words). Unknown options are rejected: a typo would otherwise silently read
something else.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field

from ..errors import InvalidConfigError

_log = logging.getLogger("kafkalog.spark")

EARLIEST, LATEST = -2, -1  # Kafka's sentinels in startingOffsets/endingOffsets JSON

STRATEGIES = ("assign", "subscribe", "subscribepattern")
_SPELLING = {  # lower-case key -> Spark's spelling, for messages
    "assign": "assign", "subscribe": "subscribe", "subscribepattern": "subscribePattern",
    "startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp", "endingtimestamp": "endingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp", "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy", "failondataloss": "failOnDataLoss",
    "minpartitions": "minPartitions", "maxrecordsperpartition": "maxRecordsPerPartition",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger", "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay", "includeheaders": "includeHeaders", "path": "path", "topic": "topic",
    "sinkid": "sinkId", "checkpointlocation": "checkpointLocation",
}
# accepted for drop-in compatibility, meaningless without a broker
_IGNORED = frozenset({"kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
                      "groupidprefix"})
SOURCE_OPTIONS = frozenset(k for k in _SPELLING if k not in ("topic", "sinkid", "checkpointlocation")) | _IGNORED
SINK_OPTIONS = frozenset({"path", "topic", "includeheaders", "sinkid", "checkpointlocation"})

_AUTO_OFFSET_RESET = """
Kafka option 'auto.offset.reset' is not supported.
Instead set the source option 'startingOffsets' to 'earliest' or 'latest'
to specify where to start. Structured Streaming manages which offsets are consumed
internally, rather than relying on the kafkaConsumer to do it. This will ensure that no
data is missed when new topics/partitions are dynamically subscribed. Note that
'startingOffsets' only applies when a new Streaming query is started, and
that resuming will always pick up from where the query left off. See the docs for more
details.
"""
_REJECTED_SOURCE = {
    "kafka.auto.offset.reset": _AUTO_OFFSET_RESET,
    "kafka.key.deserializer": "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
                              "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
                              "the keys.",
    "kafka.value.deserializer": "Kafka option 'value.deserializer' is not supported as values are deserialized as "
                                "byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
                                "deserialize the values.",
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
    # Spark hands only kafka.* options to its consumers: the bare name would do nothing against a real cluster
    "isolation.level": "option 'isolation.level' is a Kafka consumer option: set it as 'kafka.isolation.level' "
                       "(read_uncommitted or read_committed)",
}
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
_REJECTED_SINK = {
    "kafka.key.serializer": "Kafka option 'key.serializer' is not supported as keys are serialized with "
                            "ByteArraySerializer.",
    "kafka.value.serializer": "Kafka option 'value.serializer' is not supported as value are serialized with "
                              "ByteArraySerializer.",
}

INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE = (
    'Some data may have been lost because they are not available in the log any more; either the data was removed '
    'by delete-records or retention, or the topic may have been deleted before all the data in the topic was '
    'processed. If you don\'t want your query to fail on such cases, set the source option "failOnDataLoss" to '
    '"false".')
INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE = (
    'Some data may have been lost because they are not available in the log any more; either the data was removed '
    'by delete-records or retention, or the topic may have been deleted before all the data in the topic was '
    'processed. If you want your query to fail on such cases, set the source option "failOnDataLoss" to "true".')


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends, before it is resolved against the log.

    kind: ``earliest`` | ``latest`` | ``offsets`` (per-partition offsets, -2/-1 allowed) | ``timestamp`` (one ms value
    for every partition) | ``timestamps`` (per-partition ms values)."""

    kind: str
    offsets: dict = field(default_factory=dict)  # (topic, partition) -> offset or timestamp
    timestamp: int = 0


@dataclass(frozen=True)
class ReadOptions:
    path: str
    strategy: str  # assign | subscribe | subscribepattern
    topics: tuple = ()  # subscribe
    pattern: str = ""  # subscribepattern
    assigned: tuple = ()  # assign: ((topic, partition), ...)
    starting: OffsetSpec | None = None  # None: the mode's default (earliest for batch, latest for streams)
    ending: OffsetSpec | None = None
    no_match_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    include_headers: bool = False
    read_committed: bool = False  # kafka.isolation.level=read_committed
    given: frozenset = frozenset()  # lower-case keys the user set


@dataclass(frozen=True)
class WriteOptions:
    path: str
    topic: str | None = None
    sink_id: str | None = None
    checkpoint_location: str | None = None


def _name(key: str) -> str:
    return _SPELLING.get(key, key)


def _lower(options) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}


def _check_keys(opts: dict, allowed: frozenset, rejected: dict, what: str) -> None:
    for key in opts:
        if key in rejected:
            raise InvalidConfigError(rejected[key].strip())
        if key.startswith("kafka."):
            _log.debug("option %s ignored: kafkalog reads the data directory given by 'path'", key)
            continue
        if key not in allowed:
            other = SINK_OPTIONS if allowed is SOURCE_OPTIONS else SOURCE_OPTIONS
            hint = f" (it is a {'sink' if allowed is SOURCE_OPTIONS else 'source'} option)" if key in other else ""
            known = ", ".join(sorted(_name(k) for k in allowed if k not in _IGNORED))
            raise InvalidConfigError(f"unknown option '{key}' for the kafkalog {what}{hint}; known options: "
                                     f"{known}, and kafka.* (accepted and ignored)")


def _path(opts: dict) -> str:
    path = opts.get("path", "").strip()
    if not path:
        extra = (" ('kafka.bootstrap.servers' has no meaning here: kafkalog reads a data directory)"
                 if "kafka.bootstrap.servers" in opts else "")
        raise InvalidConfigError("option 'path' must be specified: the kafkalog data directory, e.g. "
                                 f".option(\"path\", \"/data/kafkalog\") or .load(\"/data/kafkalog\"){extra}")
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif path.startswith("file:"):
        path = path[len("file:"):]
    # resolved where the options are parsed (the driver's side): executors get the same absolute path
    return os.path.abspath(path)


def _bool(opts: dict, key: str, default: bool) -> bool:
    if key not in opts:
        return default
    v = opts[key].strip().lower()
    if v not in ("true", "false"):
        raise InvalidConfigError(f"option '{_name(key)}' must be true or false, got '{opts[key]}'")
    return v == "true"


def _int(opts: dict, key: str, positive: bool = True) -> int | None:
    if key not in opts:
        return None
    try:
        v = int(opts[key].strip())
    except ValueError:
        raise InvalidConfigError(f"option '{_name(key)}' must be an integer, got '{opts[key]}'") from None
    if positive and v <= 0:
        raise InvalidConfigError(f"{_name(key)} must be positive")
    return v


_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def time_string_ms(text: str, key: str = "maxtriggerdelay") -> int:
    """Spark's Utils.timeStringAsMs: an integer with an optional unit (us, ms, s, m, min, h, d); ms by default."""
    m = re.fullmatch(r"\s*(-?\d+)\s*([a-z]+)?\s*", text.lower())
    if not m or (m.group(2) and m.group(2) not in _TIME_UNITS):
        raise InvalidConfigError(f"option '{_name(key)}': invalid time string '{text}' (use e.g. 500ms, 30s, 15m, "
                                 "1h; units us, ms, s, m, min, h, d)")
    return int(int(m.group(1)) * _TIME_UNITS[m.group(2) or "ms"])


def _json_error(key: str, example: str, got: str) -> InvalidConfigError:
    return InvalidConfigError(f"option '{_name(key)}': expected e.g. {example}, got {got}")


def parse_assign(text: str) -> tuple:
    example = '{"topicA":[0,1],"topicB":[0,1]}'
    try:
        obj = json.loads(text)
    except ValueError:
        raise _json_error("assign", example, text) from None
    if not isinstance(obj, dict):
        raise _json_error("assign", example, text)
    out = []
    for topic, parts in obj.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise _json_error("assign", example, text)
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))


def parse_partition_json(key: str, text: str) -> dict:
    """{"topic":{"0":23,"1":-1}} -> {(topic, 0): 23, (topic, 1): -1} (Kafka's JsonUtils.partitionOffsets)."""
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    try:
        obj = json.loads(text)
    except ValueError:
        raise _json_error(key, example, text) from None
    if not isinstance(obj, dict):
        raise _json_error(key, example, text)
    out = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise _json_error(key, example, text)
        for p, v in parts.items():
            try:
                part = int(p)
            except ValueError:
                raise _json_error(key, example, text) from None
            if not isinstance(v, int) or isinstance(v, bool):
                raise _json_error(key, example, text)
            out[(topic, part)] = v
    return out


def _offset_spec(opts: dict, ts_key: str, by_ts_key: str, offsets_key: str) -> OffsetSpec | None:
    """Kafka's precedence: the global timestamp, then timestamps per partition, then offsets."""
    if ts_key in opts:
        text = opts[ts_key].strip()
        try:
            return OffsetSpec("timestamp", timestamp=int(text))
        except ValueError:
            raise InvalidConfigError(f"Expected a single long value, got {text}") from None
    if by_ts_key in opts:
        return OffsetSpec("timestamps", parse_partition_json(by_ts_key, opts[by_ts_key].strip()))
    if offsets_key in opts:
        text = opts[offsets_key].strip()
        low = text.lower()
        if low in ("earliest", "latest"):
            return OffsetSpec(low)
        offsets = parse_partition_json(offsets_key, text)
        for tp, off in offsets.items():
            if off < EARLIEST:
                raise InvalidConfigError(f"option '{_name(offsets_key)}': offset {off} for {tp[0]}-{tp[1]} is not "
                                         "valid (use an offset >= 0, -1 for latest or -2 for earliest)")
        return OffsetSpec("offsets", offsets)
    return None


def parse_read_options(options) -> ReadOptions:
    """Validate what applies to batch and streaming reads alike (the checks Spark's Kafka source runs at load())."""
    opts = _lower(options)
    _check_keys(opts, SOURCE_OPTIONS, _REJECTED_SOURCE, "source")
    path = _path(opts)
    given = [k for k in STRATEGIES if k in opts]
    names = "assign, subscribe, subscribePattern"
    if not given:
        raise InvalidConfigError(f"One of the following options must be specified for kafkalog source: {names}. "
                                 "See the docs for more details.")
    if len(given) > 1:
        raise InvalidConfigError(f"Only one of the following options can be specified for kafkalog source: {names}. "
                                 "See the docs for more details.")
    strategy = given[0]
    value = opts[strategy]
    topics, pattern, assigned = (), "", ()
    if strategy == "assign":
        if not value.strip().startswith("{"):
            raise InvalidConfigError(f"No topicpartitions to assign as specified value for option 'assign' is "
                                     f"'{value}'")
        assigned = parse_assign(value)
    elif strategy == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise InvalidConfigError(f"No topics to subscribe to as specified value for option 'subscribe' is "
                                     f"'{value}'")
    else:
        pattern = value.strip()
        if not pattern:
            raise InvalidConfigError(f"Pattern to subscribe is empty as specified value for option "
                                     f"'subscribePattern' is '{value}'")
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidConfigError(f"option 'subscribePattern': invalid regular expression '{pattern}': {e}") \
                from None
    strategy_text = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_text not in ("error", "latest"):
        raise InvalidConfigError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got "
                                 f"'{opts['startingoffsetsbytimestampstrategy']}'")
    max_offsets = _int(opts, "maxoffsetspertrigger")
    min_offsets = _int(opts, "minoffsetspertrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise InvalidConfigError(f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
                                 f"maxOffsetsPerTrigger({max_offsets}).")
    delay = time_string_ms(opts["maxtriggerdelay"]) if "maxtriggerdelay" in opts else 15 * 60 * 1000
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise InvalidConfigError(f"Invalid value {opts['kafka.isolation.level']} for configuration isolation.level: "
                                 f"String must be one of: {', '.join(ISOLATION_LEVELS)}")
    return ReadOptions(
        path=path, strategy=strategy, topics=topics, pattern=pattern, assigned=assigned,
        starting=_offset_spec(opts, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets"),
        ending=_offset_spec(opts, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets"),
        no_match_latest=strategy_text == "latest",
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        min_partitions=_int(opts, "minpartitions"),
        max_records_per_partition=_int(opts, "maxrecordsperpartition"),
        max_offsets_per_trigger=max_offsets, min_offsets_per_trigger=min_offsets, max_trigger_delay_ms=delay,
        include_headers=_bool(opts, "includeheaders", False), read_committed=isolation == "read_committed",
        given=frozenset(opts))


def check_batch(o: ReadOptions) -> None:
    """Spark's validateBatchOptions: where a batch read may start and end."""
    if o.starting is not None:
        if o.starting.kind == "latest":
            raise InvalidConfigError("starting offset can't be latest for batch queries on kafkalog")
        if o.starting.kind == "offsets":
            for (t, p), off in sorted(o.starting.offsets.items()):
                if off == LATEST:
                    raise InvalidConfigError(f"startingOffsets for {t}-{p} can't be latest for batch queries on "
                                             "kafkalog")
    if o.ending is not None:
        if o.ending.kind == "earliest":
            raise InvalidConfigError("ending offset can't be earliest for batch queries on kafkalog")
        if o.ending.kind == "offsets":
            for (t, p), off in sorted(o.ending.offsets.items()):
                if off == EARLIEST:
                    raise InvalidConfigError(f"ending offset for {t}-{p} can't be earliest for batch queries on "
                                             "kafkalog")
    for key in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
        if key in o.given:
            _log.warning("%s option ignored in batch queries", _name(key))
    s, e = o.starting, o.ending
    if s is not None and e is not None and s.kind == e.kind and s.kind in ("offsets", "timestamps"):
        if set(s.offsets) != set(e.offsets):
            raise InvalidConfigError(
                f"The topic-partitions of the starting and ending {'offsets' if s.kind == 'offsets' else 'timestamps'}"
                f" differ: start {_tps(s.offsets)}, end {_tps(e.offsets)}")
        for tp in sorted(s.offsets):
            a, b = s.offsets[tp], e.offsets[tp]
            if a >= 0 and b >= 0 and a > b:
                what = "offset" if s.kind == "offsets" else "timestamp"
                raise InvalidConfigError(f"The starting {what} ({a}) for {tp[0]}-{tp[1]} is greater than the ending "
                                         f"{what} ({b}).")


def check_stream(o: ReadOptions) -> None:
    """Spark's validateStreamOptions: a stream has no end."""
    if "endingoffsets" in o.given:
        raise InvalidConfigError("ending offset not valid in streaming queries")
    if "endingoffsetsbytimestamp" in o.given:
        raise InvalidConfigError("ending timestamp not valid in streaming queries")
    if "endingtimestamp" in o.given:
        raise InvalidConfigError("ending timestamp not valid in streaming queries")


def _tps(d) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(d)) + "]"


def parse_write_options(options) -> WriteOptions:
    opts = _lower(options)
    _check_keys(opts, SINK_OPTIONS, _REJECTED_SINK, "sink")
    topic = opts.get("topic")
    topic = topic.strip() if topic is not None else None
    sink_id = opts.get("sinkid")
    if sink_id is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", sink_id.strip()):
        raise InvalidConfigError(f"option 'sinkId' must be 1-200 characters of [A-Za-z0-9._-], got '{sink_id}'")
    return WriteOptions(path=_path(opts), topic=topic or None, sink_id=sink_id.strip() if sink_id else None,
                        checkpoint_location=opts.get("checkpointlocation") or None)
