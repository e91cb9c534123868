"""Group configs (KIP-848, KIP-932): the per-group keys a broker keeps for resource type GROUP (32) of
DescribeConfigs, IncrementalAlterConfigs and AlterConfigs, as Kafka 4.4's ``GroupConfig`` and
``GroupConfigManager`` keep them.

A group config overrides, for one group, the broker key it names (its synonym): ``share.auto.offset.reset`` and
``share.record.lock.duration.ms`` for a share group, ``consumer.session.timeout.ms`` for a KIP-848 consumer group,
and so on (``KEYS``). A value set is checked as Kafka checks it: the key's type and its own range (Kafka's
ConfigDef), then the broker's bounds for it (``group.share.min.record.lock.duration.ms`` ...
``group.share.max.record.lock.duration.ms``); the broker's bounds are applied again when the value is used (a
bound tightened after the value was set caps it, as Kafka's ``GroupConfig.evaluate``). A group's configs exist
whether or not the group does (Kafka's controller keeps them as config records) and stay after DeleteGroups, as
Kafka 4.4's do. Kafka's streams keys are kept and described (kafkalog serves no streams groups).

Durable as the broker's other state: ``.kafkalog-broker/group-configs.json`` in the data dir, written (temp, fsync,
rename, fsync of the directory) before an alteration is answered; a failed write answers an error and changes
nothing in memory::

    group-configs.json => {"version": 1, "groups": {"<group id>": {"<key>": "<value>", ...}, ...}}
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidConfigError, KafkaError
from ..storage.files import atomic_write, make_durable_dir

log = logging.getLogger("kafkalog.broker")

INT, BOOLEAN, STRING, LONG, LIST = "INT", "BOOLEAN", "STRING", "LONG", "LIST"
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


@dataclass(frozen=True)
class GroupKey:
    name: str
    type: str
    synonym: str | None  # the broker key it overrides (its value is the group's default)
    default: object  # when the broker has no such key (kafkalog serves no streams groups)
    doc: str
    at_least: int | None = None  # Kafka's ConfigDef range of the key itself
    at_most: int | None = None
    bounds: tuple[str | None, str | None] = (None, None)  # the broker's min / max keys for it
    choices: tuple | None = None
    internal: bool = False  # Kafka's defineInternal: settable, not described


def _share_reset_ok(v: str) -> bool:
    v = v.strip().lower()
    if v in ("latest", "earliest"):
        return True
    if v.startswith("by_duration:"):
        d = v[len("by_duration:"):].strip()
        return bool(DURATION.match(d)) and d.upper() != "P" and not d.upper().endswith("T")
    return False


def _keys(*keys: GroupKey) -> dict[str, GroupKey]:
    return {k.name: k for k in keys}


KEYS = _keys(
    # in the order Kafka 4.4 describes them (a hash map's)
    GroupKey("consumer.assignor.offload.enable", BOOLEAN, "group.consumer.assignor.offload.enable", False,
             "Whether to offload consumer group assignment to a group coordinator background thread."),
    GroupKey("consumer.session.timeout.ms", INT, "group.consumer.session.timeout.ms", 45000,
             "The timeout to detect client failures when using the consumer group protocol.", at_least=1,
             bounds=("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms")),
    GroupKey("streams.assignor.name", STRING, "group.streams.assignors", "sticky",
             "The task assignor to use for this streams group."),
    GroupKey("consumer.assignment.interval.ms", INT, "group.consumer.assignment.interval.ms", 0,
             "The interval between assignment updates for a consumer group.", at_least=0,
             bounds=("group.consumer.min.assignment.interval.ms", "group.consumer.max.assignment.interval.ms")),
    GroupKey("errors.deadletterqueue.copy.record.enable", BOOLEAN, None, False,
             "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ "
             "topic, or just write a record containing the context information headers."),
    GroupKey("share.auto.offset.reset", STRING, "share.auto.offset.reset", "latest",
             "The strategy to initialize the share-partition start offset."),
    GroupKey("streams.rack.aware.assignment.tags", LIST, "group.streams.rack.aware.assignment.tags", "",
             "List of client tag keys used to distribute standby replicas across Kafka Streams instances."),
    GroupKey("share.renew.acknowledge.enable", BOOLEAN, None, True,
             "Whether the renew acknowledge type is enabled for the share group."),
    GroupKey("streams.initial.rebalance.delay.ms", INT, "group.streams.initial.rebalance.delay.ms", 3000,
             "The amount of time the group coordinator will wait for more streams clients to join a new group "
             "before performing the first rebalance.", at_least=0),
    GroupKey("share.session.timeout.ms", INT, "group.share.session.timeout.ms", 45000,
             "The timeout to detect client failures when using the share group protocol.", at_least=1,
             bounds=("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms")),
    GroupKey("streams.assignment.interval.ms", INT, "group.streams.assignment.interval.ms", 1000,
             "The interval between assignment updates for a streams group.", at_least=0,
             bounds=("group.streams.min.assignment.interval.ms", "group.streams.max.assignment.interval.ms")),
    GroupKey("share.heartbeat.interval.ms", INT, "group.share.heartbeat.interval.ms", 5000,
             "The heartbeat interval given to the members of a share group.", at_least=1,
             bounds=("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms")),
    GroupKey("streams.heartbeat.interval.ms", INT, "group.streams.heartbeat.interval.ms", 5000,
             "The heartbeat interval given to the members.", at_least=1,
             bounds=("group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms")),
    GroupKey("share.delivery.count.limit", INT, "group.share.delivery.count.limit", 5,
             "The maximum number of delivery attempts for a record delivered to a share group.", at_least=2,
             bounds=("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit")),
    GroupKey("errors.deadletterqueue.topic.name", STRING, None, "",
             "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank "
             "(the default), the group does not have a DLQ topic."),
    GroupKey("consumer.heartbeat.interval.ms", INT, "group.consumer.heartbeat.interval.ms", 5000,
             "The heartbeat interval given to the members of a consumer group.", at_least=1,
             bounds=("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms")),
    GroupKey("share.record.lock.duration.ms", INT, "group.share.record.lock.duration.ms", 30000,
             "The record acquisition lock duration in milliseconds for share groups.", at_least=1000,
             bounds=("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms")),
    GroupKey("share.assignment.interval.ms", INT, "group.share.assignment.interval.ms", 1000,
             "The interval between assignment updates for a share group.", at_least=0,
             bounds=("group.share.min.assignment.interval.ms", "group.share.max.assignment.interval.ms")),
    GroupKey("share.isolation.level", STRING, None, "read_uncommitted",
             "Controls how to read records written transactionally. If set to \"read_committed\", the share group "
             "will only deliver transactional records which have been committed. If set to \"read_uncommitted\", "
             "the share group will return all messages, even transactional messages which have been aborted. "
             "Non-transactional records will be returned unconditionally in either mode.",
             choices=ISOLATION_LEVELS),
    GroupKey("streams.session.timeout.ms", INT, "group.streams.session.timeout.ms", 45000,
             "The timeout to detect client failures when using the streams group protocol.", at_least=1,
             bounds=("group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms")),
    GroupKey("share.partition.max.record.locks", INT, "group.share.partition.max.record.locks", 2000,
             "Share-group record lock limit per share-partition.", at_least=100,
             bounds=("group.share.min.partition.max.record.locks", "group.share.max.partition.max.record.locks")),
    GroupKey("streams.num.standby.replicas", INT, "group.streams.num.standby.replicas", 0,
             "The number of standby replicas for each task.", at_least=0,
             bounds=(None, "group.streams.max.standby.replicas")),
    # settable, not described (Kafka's internal keys)
    GroupKey("share.assignor.offload.enable", BOOLEAN, "group.share.assignor.offload.enable", True,
             "Whether to offload share group assignment to a group coordinator background thread.", internal=True),
    GroupKey("streams.assignor.offload.enable", BOOLEAN, "group.streams.assignor.offload.enable", True,
             "Whether to offload streams group assignment to a group coordinator background thread.",
             internal=True),
    GroupKey("streams.task.offset.interval.ms", INT, "group.streams.task.offset.interval.ms", 60000,
             "The interval in which the warmup task changelog offsets on a client are updated on the broker.",
             at_least=1, internal=True),
    GroupKey("streams.num.warmup.replicas", INT, "group.streams.num.warmup.replicas", 2,
             "The maximum number of warmup task replicas.", at_least=0,
             bounds=(None, "group.streams.max.warmup.replicas"), internal=True),
    GroupKey("streams.acceptable.recovery.lag", LONG, "group.streams.acceptable.recovery.lag", 10000,
             "The maximum acceptable lag (number of offsets to catch up) for a client to be considered caught-up "
             "enough to receive an active task assignment.", at_least=0, internal=True),
)

# the broker's bounds for group configs (Kafka 4.4's GroupCoordinatorConfig / ShareGroupConfig defaults), used when
# the broker's config does not declare the key
BOUND_DEFAULTS = {
    "group.consumer.min.session.timeout.ms": 45000, "group.consumer.max.session.timeout.ms": 60000,
    "group.consumer.min.heartbeat.interval.ms": 5000, "group.consumer.max.heartbeat.interval.ms": 15000,
    "group.consumer.min.assignment.interval.ms": 0, "group.consumer.max.assignment.interval.ms": 15000,
    "group.share.min.session.timeout.ms": 45000, "group.share.max.session.timeout.ms": 60000,
    "group.share.min.heartbeat.interval.ms": 5000, "group.share.max.heartbeat.interval.ms": 15000,
    "group.share.min.record.lock.duration.ms": 15000, "group.share.max.record.lock.duration.ms": 60000,
    "group.share.min.delivery.count.limit": 2, "group.share.max.delivery.count.limit": 10,
    "group.share.min.partition.max.record.locks": 100, "group.share.max.partition.max.record.locks": 4000,
    "group.share.min.assignment.interval.ms": 0, "group.share.max.assignment.interval.ms": 15000,
    "group.streams.min.session.timeout.ms": 45000, "group.streams.max.session.timeout.ms": 60000,
    "group.streams.min.heartbeat.interval.ms": 5000, "group.streams.max.heartbeat.interval.ms": 15000,
    "group.streams.min.assignment.interval.ms": 0, "group.streams.max.assignment.interval.ms": 15000,
    "group.streams.max.standby.replicas": 2, "group.streams.max.warmup.replicas": 20,
}


def parse(key: GroupKey, value: str):
    """The typed value of ``value`` for ``key`` (Kafka's ConfigDef.parse); InvalidConfigError in Kafka's words."""
    v = value.strip() if isinstance(value, str) else value
    if key.type in (INT, LONG):
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"Invalid value {value} for configuration {key.name}: Not a number of type "
                                     f"{key.type}") from None
        if key.type == INT and not -2**31 <= n <= INT_MAX:
            raise InvalidConfigError(f"Invalid value {value} for configuration {key.name}: Not a number of type INT")
        if key.at_least is not None and n < key.at_least:
            raise InvalidConfigError(f"Invalid value {n} for configuration {key.name}: Value must be at least "
                                     f"{key.at_least}")
        if key.at_most is not None and n > key.at_most:
            raise InvalidConfigError(f"Invalid value {n} for configuration {key.name}: Value must be no more than "
                                     f"{key.at_most}")
        return n
    if key.type == BOOLEAN:
        if str(v).lower() not in ("true", "false"):
            raise InvalidConfigError(f"Invalid value {value} for configuration {key.name}: Expected value to be "
                                     "either true or false")
        return str(v).lower() == "true"
    s = str(v)
    if key.type == LIST:
        return ",".join(x.strip() for x in s.split(",") if x.strip())
    if key.choices is not None and s not in key.choices:
        raise InvalidConfigError(f"Invalid value {value} for configuration {key.name}: String must be one of: "
                                 f"{', '.join(key.choices)}")
    if key.name == "share.auto.offset.reset" and not _share_reset_ok(s):
        raise InvalidConfigError(f"Invalid value {value} for configuration {key.name}: Invalid value `{s}` for "
                                 "configuration share.auto.offset.reset. The value must be either 'earliest', "
                                 "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
    if key.name == "errors.deadletterqueue.topic.name" and s.startswith("__"):
        raise InvalidConfigError("errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'")
    return s


def render(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class GroupConfigs:
    """Every group's configs: ``{group id: {key: value as set}}``, kept in ``path``. Read from any thread (``update``
    swaps a new dict in once the file is durable); alterations run on worker threads under ``lock``."""

    def __init__(self, config, path: Path):
        self.config = config
        self.path = path
        self.groups: dict[str, dict[str, str]] = self._saved()
        self.lock = threading.Lock()  # one alteration at a time (read, check, write, take)

    def _saved(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.error("%s cannot be read (%s): no group has configs of its own", self.path, e)
            return {}
        groups = data.get("groups") if isinstance(data, dict) else None
        out = {}
        for gid, kv in (groups or {}).items():
            if isinstance(kv, dict):
                out[gid] = {k: str(v) for k, v in kv.items() if k in KEYS}
        return out

    # -- reading ---------------------------------------------------------------------------------------------------

    def broker_value(self, key: GroupKey):
        if key.synonym is not None and key.synonym in self.config:
            return self.config[key.synonym]
        return key.default

    def bound(self, name: str | None):
        if name is None:
            return None
        if name in self.config:
            return self.config[name]
        return BOUND_DEFAULTS.get(name)

    def value(self, group: str, name: str):
        """The value in force for ``group``: its own (capped to the broker's bounds now), else the broker's."""
        key = KEYS[name]
        raw = self.groups.get(group, {}).get(name)
        if raw is None:
            return self.broker_value(key)
        try:
            v = parse(key, raw)
        except KafkaError:
            return self.broker_value(key)
        lo, hi = (self.bound(b) for b in key.bounds)
        if lo is not None and v < lo:
            v = lo
        if hi is not None and v > hi:
            v = hi
        return v

    def of(self, group: str) -> dict[str, str]:
        return dict(self.groups.get(group, {}))

    # -- checking and changing -------------------------------------------------------------------------------------

    def validate(self, group: str, new: dict[str, str]) -> None:
        """Kafka's GroupConfig.validate of the group's configs after a change (``new``: every key set then)."""
        parsed = {}
        for name, raw in new.items():
            key = KEYS.get(name)
            if key is None:
                raise InvalidConfigError(f"Unknown group config name: {name}")
            parsed[name] = parse(key, raw)
        for name, v in parsed.items():
            key = KEYS[name]
            lo_name, hi_name = key.bounds
            lo, hi = self.bound(lo_name), self.bound(hi_name)
            if lo is not None and hi is not None and not lo <= v <= hi:
                raise InvalidConfigError(f"{name} must be in the range {lo} to {hi} inclusive.")
            if lo is not None and v < lo:
                raise InvalidConfigError(f"{name} must be greater than or equal to {lo}.")
            if hi is not None and v > hi:
                raise InvalidConfigError(f"{name} must be less than or equal to {hi}.")
        for kind in ("consumer", "share", "streams"):
            s_name, h_name = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
            if s_name in parsed or h_name in parsed:
                session = parsed.get(s_name, self.broker_value(KEYS[s_name]))
                beat = parsed.get(h_name, self.broker_value(KEYS[h_name]))
                if session <= beat:
                    raise InvalidConfigError(f"{s_name} must be greater than {h_name}")

    def update(self, changes: dict[str, dict[str, str]]) -> None:
        """Make ``{group: its configs after the change}`` durable, then take it (an empty dict drops the group's)."""
        groups = {g: dict(kv) for g, kv in self.groups.items()}
        for g, kv in changes.items():
            if kv:
                groups[g] = dict(kv)
            else:
                groups.pop(g, None)
        self._write(groups)
        self.groups = groups

    def _write(self, groups: dict) -> None:
        make_durable_dir(self.path.parent)
        atomic_write(self.path, json.dumps({"version": 1, "groups": groups}, indent=1, sort_keys=True).encode())


__all__ = ["DURATION", "KEYS", "LIST", "GroupConfigs", "GroupKey", "parse", "render"]
