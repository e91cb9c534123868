"""Offsets of a Spark read: resolved against the log, split into Spark tasks, rate-limited per micro-batch.

Streaming offsets are Spark's KafkaSourceOffset JSON: for each subscribed partition the *next* offset to read::

    {"topicA": {"0": 50, "1": 48}, "topicB": {"0": 7}}

Topics and partitions are always in sorted order (Spark compares offsets by their JSON text). A range is
``(topic, partition, start, end)``, end exclusive. Everything here is a pure function of its arguments plus the log
as it is now, so a replayed micro-batch plans the same ranges (except where data was removed meanwhile).
"""

from __future__ import annotations

import logging
import math
import re

from ..errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from .options import EARLIEST, INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE, INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE, LATEST

_log = logging.getLogger("kafkalog.spark")


def report_data_loss(message: str, fail: bool) -> None:
    """failOnDataLoss: raise (naming topic, partition and offsets), or log a warning and go on."""
    if fail:
        raise OffsetOutOfRangeError(f"{message}. {INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE}")
    _log.warning("%s. %s", message, INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE)


def subscribed(store, o) -> list[tuple[str, int]]:
    """The partitions a read covers now, sorted. Subscriptions follow the data dir (topics and partitions that
    appear later are picked up by streams); ``assign`` names partitions that must exist."""
    if o.strategy == "assign":
        out = []
        for t, p in o.assigned:
            try:
                n = store.partitions_for(t)
            except UnknownTopicOrPartitionError:
                n = 0
            if p >= n:
                raise UnknownTopicOrPartitionError(f"assign: partition {t}-{p} does not exist in {store.path}"
                                                   + (f" (topic {t} has {n} partitions)" if n else ""))
            out.append((t, p))
        return sorted(out)
    existing = store.topics()
    if o.strategy == "subscribe":
        topics = [t for t in o.topics if t in existing]
    else:
        rx = re.compile(o.pattern)
        # like a Kafka consumer's pattern subscription: internal topics (__consumer_offsets) are left out
        topics = [t for t in existing if not t.startswith("__") and rx.fullmatch(t)]
    return sorted((t, p) for t in topics for p in range(store.partitions_for(t)))


def log_bounds(store, tps, read_committed: bool = False) -> dict:
    """(topic, partition) -> (log start offset, log end offset), each read fresh; with ``read_committed`` the end
    is the last stable offset (what Kafka's ListOffsets answers a read_committed consumer for "latest")."""
    out = {}
    for tp in tps:
        log = store.log(*tp)
        out[tp] = (log.log_start_offset, log.last_stable_offset if read_committed else log.log_end_offset)
    return out


def _check_covers(spec_offsets: dict, tps, key: str) -> None:
    if set(spec_offsets) != set(tps):
        spec = ", ".join(f"{t}-{p}" for t, p in sorted(spec_offsets))
        have = ", ".join(f"{t}-{p}" for t, p in sorted(tps))
        raise InvalidConfigError(f"If {key} contains specific offsets, you must specify all TopicPartitions.\n"
                                 f"Use -1 for latest, -2 for earliest.\nSpecified: [{spec}] Assigned: [{have}]")


def _for_time(store, tp, ts: int):
    try:
        found = store.log(*tp).offset_for_time(ts)
    except ValueError as e:
        raise InvalidConfigError(f"timestamp {ts} for {tp[0]}-{tp[1]}: {e}") from None
    return None if found is None else found.offset


def resolve_start(store, tps, spec, default: str, no_match_latest: bool, fail_on_data_loss: bool,
                  read_committed: bool = False) -> dict:
    """Starting offset of each partition (the next offset to read)."""
    bounds = log_bounds(store, tps, read_committed)
    kind = default if spec is None else spec.kind
    out = {}
    if kind in ("offsets", "timestamps"):
        key = "startingOffsets" if kind == "offsets" else "startingOffsetsByTimestamp"
        _check_covers(spec.offsets, tps, key)
    for tp in tps:
        lso, leo = bounds[tp]
        if kind == "earliest":
            out[tp] = lso
        elif kind == "latest":
            out[tp] = leo
        elif kind == "offsets":
            off = spec.offsets[tp]
            if off == EARLIEST:
                out[tp] = lso
            elif off == LATEST:
                out[tp] = leo
            else:
                if off < lso:
                    report_data_loss(f"startingOffsets for {tp[0]}-{tp[1]} was {off} but the log starts at offset "
                                     f"{lso}: offsets [{off}, {lso}) are gone", fail_on_data_loss)
                    off = lso
                out[tp] = off
        else:
            ts = spec.timestamp if kind == "timestamp" else spec.offsets[tp]
            off = _for_time(store, tp, ts)
            if off is None:
                if not no_match_latest:
                    raise InvalidConfigError(f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and "
                                             f"timestamp {ts}.")
                off = leo
            out[tp] = off
    return out


def resolve_end(store, tps, spec, read_committed: bool = False) -> dict:
    """Ending offset (exclusive) of each partition of a batch read; a timestamp with no match means latest.
    read_committed: latest is the last stable offset, and no range ends past it."""
    bounds = log_bounds(store, tps, read_committed)
    kind = "latest" if spec is None else spec.kind
    if kind in ("offsets", "timestamps"):
        _check_covers(spec.offsets, tps, "endingOffsets" if kind == "offsets" else "endingOffsetsByTimestamp")
    out = {}
    for tp in tps:
        lso, leo = bounds[tp]
        if kind == "latest":
            off = leo
        elif kind == "offsets":
            off = spec.offsets[tp]
            if off == LATEST:
                off = leo
            elif off > leo:
                _log.warning("endingOffsets for %s-%d is %d, past the %s %d: reading to %d", tp[0], tp[1], off,
                             "last stable offset" if read_committed else "log end offset", leo, leo)
                off = leo
        else:
            ts = spec.timestamp if kind == "timestamp" else spec.offsets[tp]
            off = _for_time(store, tp, ts)
            if off is None or off > leo:
                off = leo
        out[tp] = off
    return out


def batch_ranges(start: dict, end: dict) -> list:
    out = []
    for tp in sorted(end):
        s, e = start[tp], end[tp]
        if s > e:
            raise InvalidConfigError(f"The resolved starting offset {s} is greater than the resolved ending offset "
                                     f"{e} for topic-partition {tp[0]}-{tp[1]}")
        out.append((tp[0], tp[1], s, e))
    return out


def stream_ranges(store, start: dict, end: dict, fail_on_data_loss: bool) -> list:
    """Ranges of one micro-batch: partitions absent from ``start`` are new (read from their log start); data
    removed below a range's start is reported; partitions absent from ``end`` are gone."""
    gone = sorted(set(start) - set(end))
    if gone:
        report_data_loss(f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone", fail_on_data_loss)
    out = []
    existing = set(store.topics())
    for tp in sorted(end):
        e = end[tp]
        if tp[0] not in existing:
            report_data_loss(f"{tp[0]}-{tp[1]} is gone: offsets up to {e} cannot be read", fail_on_data_loss)
            continue
        log = store.log(*tp)
        lso = log.log_start_offset
        if tp in start:
            s = start[tp]
        else:
            s = lso
            if s != 0:
                report_data_loss(f"Added partition {tp[0]}-{tp[1]} starts from {s} instead of 0. Some data may "
                                 "have been missed", fail_on_data_loss)
        if s < lso:
            report_data_loss(f"Cannot read offsets [{s}, {min(lso, e)}) of {tp[0]}-{tp[1]}: the log starts at "
                             f"offset {lso} now", fail_on_data_loss)
            s = lso
        if e < s:
            if tp in start and start[tp] > e:
                report_data_loss(f"Partition {tp[0]}-{tp[1]}'s offset was changed from {start[tp]} to {e}, some "
                                 "data may have been missed", fail_on_data_loss)
            continue
        out.append((tp[0], tp[1], s, e))
    return out


def _part_count(size: int, total: int, parts: int) -> int:
    # Scala's math.round: half up
    return max(int(math.floor(size / total * parts + 0.5)), 1)


def _divide(t, p, s, e, parts: int) -> list:
    out, remaining, pos = [], e - s, s
    for i in range(parts):
        this = remaining // (parts - i)
        remaining -= this
        out.append((t, p, pos, min(pos + this, e)))
        pos += this
    return [r for r in out if r[3] > r[2]]


def split_ranges(ranges, min_partitions: int | None, max_records: int | None) -> list:
    """One Spark task per range, except that ranges above ``maxRecordsPerPartition`` are cut into equal pieces of at
    most that many records, and then, while there are fewer than ``minPartitions`` pieces, large pieces are split
    in proportion to their size (Spark's KafkaOffsetRangeCalculator). Empty ranges are dropped."""
    ranges = [r for r in ranges if r[3] > r[2]]
    if max_records:
        ranges = [piece for r in ranges for piece in _divide(*r, math.ceil((r[3] - r[2]) / max_records))]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r[3] - r[2] for r in ranges)
    unsplit = {i for i, r in enumerate(ranges) if _part_count(r[3] - r[2], total, min_partitions) == 1}
    split_total = total - sum(ranges[i][3] - ranges[i][2] for i in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    out = []
    for i, r in enumerate(ranges):
        parts = 1 if i in unsplit else _part_count(r[3] - r[2], split_total, split_min)
        out.extend(_divide(*r, parts))
    return out


def rate_limit(limit: int, start: dict, latest: dict, earliest: dict) -> dict:
    """maxOffsetsPerTrigger: ``limit`` offsets spread over the partitions in proportion to what each has available
    (floor, but at least one for a partition with data: none is starved). ``earliest`` gives the start of partitions
    absent from ``start`` (Spark's KafkaMicroBatchStream.rateLimit)."""
    sizes = {}
    for tp, end in latest.items():
        begin = start.get(tp, earliest.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = start.get(tp, earliest.get(tp))
        prorate = limit * (sizes[tp] / total)
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + n)
    return out


def to_json(offsets: dict) -> dict:
    """{(topic, partition): offset} -> {"topic": {"partition": offset}} in sorted order."""
    out: dict = {}
    for (t, p) in sorted(offsets):
        out.setdefault(t, {})[str(p)] = int(offsets[(t, p)])
    return out


def from_json(obj) -> dict:
    out = {}
    for t, parts in (obj or {}).items():
        for p, off in parts.items():
            out[(t, int(p))] = int(off)
    return out
