"""KafkaAdminClient: kafka-python 3.0.12's admin API over a LogStore (one node, broker id 0, no network).

Return values are what kafka-python builds from the broker's responses, so code written against a real cluster
reads them unchanged::

    create_topics  -> {'topics': [{'name', 'topic_id', 'error_code', 'error_message', 'topic_config_error_code',
                                   'num_partitions', 'replication_factor', 'configs': {key: {...}}}]}
    delete_topics  -> {'topics': [{'name', 'topic_id', 'error_code', 'error_message'}]}
    describe_topics-> [{'error_code', 'name', 'topic_id', 'is_internal', 'authorized_operations',
                        'partitions': [{'error_code', 'partition_index', 'leader_id', 'leader_epoch',
                                        'replica_nodes', 'isr_nodes', 'offline_replicas'}]}]
    describe_configs-> {'topic': {name: {key: {'value', 'read_only', 'config_source', 'is_default', 'is_sensitive',
                                               'synonyms', 'config_type', 'documentation'}}}}
    alter_configs  -> {'topic': {name: 'OK' | '[Error <code>] <Class>: <message>'}}
    delete_records -> {TopicPartition: {'partition_index', 'low_watermark', 'error_code'}}   (KIP-107)

Like kafka-python, a call naming several topics or partitions handles each one on its own (as a broker does) and
then, with ``raise_errors=True`` (the default), raises the first error; the exception carries the full result as
``exc.results``. kafkalog has no topic ids (KIP-516): ``topic_id`` is the null UUID, as Kafka reports for a
topic without one.
"""

from __future__ import annotations

import threading
from enum import IntEnum

from .. import errors as _errors
from ..config import CONFIG_KEYS, INT_MAX, SYNONYMS, TOPIC, Config
from ..errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    LogClosedError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from ..storage import LogStore
from ..storage.store import validate_topic_name
from ..structs import OffsetAndMetadata, TopicPartition

__all__ = ["AlterConfigOp", "ConfigFilterType", "ConfigResource", "ConfigResourceType", "KafkaAdminClient",
           "NewTopic"]

# Codes 38 and 39 have no class in errors.py yet: until they do, these errors are reported as INVALID_REQUEST (42).
_InvalidReplicationFactorError = getattr(_errors, "InvalidReplicationFactorError", InvalidRequestError)
_InvalidReplicaAssignmentError = getattr(_errors, "InvalidReplicaAssignmentError", InvalidRequestError)

NULL_TOPIC_ID = "00000000-0000-0000-0000-000000000000"
BROKER_ID = 0
PROTOCOL_TYPE = "consumer"
# Kafka's Topic.INTERNAL_TOPICS (is_internal in metadata)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# what a broker without an authorizer reports for a topic (AclEntry.supportedOperations(TOPIC)), in wire order
TOPIC_OPERATIONS = ["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"]

# kafka-python's KafkaAdminClient configuration (2.x and 3.0.12): accepted so that an app's admin config moves over
# unchanged, and ignored: there is no network, no broker version, no security layer and no metrics reporter.
IGNORED_CONFIGS = frozenset({
    "bootstrap_servers", "client_id", "request_timeout_ms", "connections_max_idle_ms", "reconnect_backoff_ms",
    "reconnect_backoff_max_ms", "max_in_flight_requests_per_connection", "receive_message_max_bytes",
    "receive_buffer_bytes", "send_buffer_bytes", "socket_options", "sock_chunk_bytes", "sock_chunk_buffer_count",
    "retry_backoff_ms", "metadata_max_age_ms", "client_dns_lookup", "security_protocol", "ssl_context",
    "ssl_check_hostname", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_crlfile", "api_version",
    "api_version_auto_timeout_ms", "bootstrap_timeout_ms", "selector", "sasl_mechanism", "sasl_plain_username",
    "sasl_plain_password", "sasl_kerberos_name", "sasl_kerberos_service_name", "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider", "proxy_url", "socks5_proxy", "metrics", "metric_group_prefix", "metric_reporters",
    "metrics_num_samples", "metrics_sample_window_ms", "kafka_client",
})


# ---------------------------------------------------------------------------------------------------- value types

class ConfigResourceType(IntEnum):
    """kafka-python's ConfigResourceType (wire values)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs operations (KIP-339), kafka-python's AlterConfigOp."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigFilterType(IntEnum):
    """Which keys describe_configs returns, kafka-python's ConfigFilterType: MODIFIED (the default) = overridden
    on the topic; DYNAMIC/ALL = every key; DEFAULT = not overridden on the topic; STATIC = set in the store's
    config (a broker's server.properties)."""

    ALL = 0
    DYNAMIC = 1
    MODIFIED = 2
    DEFAULT = 3
    STATIC = 4


class ConfigResource:
    """kafka-python's ConfigResource: ``resource_type`` (a ConfigResourceType, its name or its value), ``name``,
    ``configs`` (keys to describe, or ``{key: value | (op, value)}`` to alter; None describes every key)."""

    def __init__(self, resource_type, name, configs=None):
        self.resource_type = _resource_type(resource_type)
        self.name = name
        self.configs = configs

    def __str__(self):
        return f"ConfigResource {self.name}={self.resource_type}"

    def __repr__(self):
        return f"ConfigResource({self.resource_type}, {self.name}, {self.configs})"


class NewTopic:
    """kafka-python's NewTopic. On one node ``replication_factor`` is 1 or -1 (the default), and a
    ``replica_assignments`` entry, ``{partition: [0]}``, may only name broker 0."""

    def __init__(self, name, num_partitions=-1, replication_factor=-1, replica_assignments=None, topic_configs=None):
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = replica_assignments or {}
        self.topic_configs = topic_configs or {}

    def __repr__(self):
        return (f"NewTopic({self.name!r}, num_partitions={self.num_partitions}, "
                f"replication_factor={self.replication_factor})")


def _enum(enum_cls, value, what):
    """A member of ``enum_cls`` from a member (ours or kafka-python's), its name or its int value."""
    if isinstance(value, enum_cls):
        return value
    try:
        if isinstance(value, str):
            return enum_cls[value.strip().upper().replace("-", "_")]
        if isinstance(value, IntEnum):  # kafka-python's enum of the same name
            return enum_cls[value.name]
        return enum_cls(int(value))
    except (KeyError, ValueError, TypeError):
        allowed = ", ".join(m.name for m in enum_cls)
        raise ValueError(f"{what} {value!r}: expected one of {allowed}") from None


def _resource_type(value) -> ConfigResourceType:
    return _enum(ConfigResourceType, value, "config resource type")


def _error_string(exc: KafkaError) -> str:
    # kafka-python's str(BrokerResponseError): "[Error 40] InvalidConfigurationError: message"
    return f"[Error {exc.code}] {type(exc).__name__}: {exc}"


def _raise_first(errs: list[KafkaError], results):
    if errs:
        first = errs[0]
        first.results = results
        raise first


# ---------------------------------------------------------------------------------------------------- config views

def _config_type(key: str) -> str:
    spec = CONFIG_KEYS[key]
    if key in ("cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
        return "LIST"
    if spec.type is bool:
        return "BOOLEAN"
    if spec.type is int:
        return "INT" if spec.high == INT_MAX else "LONG"
    return "STRING"


def _render(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _broker_key(key: str) -> str:
    """The server.properties name of a topic key (log.retention.ms for retention.ms), as Kafka's synonyms list it."""
    for broker_key, (topic_key, mult) in SYNONYMS.items():
        if topic_key == key and mult == 1:
            return broker_key
    return key


TOPIC_KEYS = tuple(k for k, spec in CONFIG_KEYS.items() if spec.scope == TOPIC)
# topic keys whose broker synonym (log.retention.ms, log.roll.ms, log.roll.jitter.ms, log.flush.interval.ms) has no
# default in Kafka (the default lives in an hours/scheduler key): Kafka lists no DEFAULT_CONFIG synonym for them
_NO_DEFAULT_SYNONYM = frozenset({"retention.ms", "segment.ms", "segment.jitter.ms", "flush.ms"})


def _topic_config_entries(store_config: Config, topic_overrides: dict, include_synonyms: bool) -> dict:
    """{key: DescribeConfigs entry} for every topic key, sources resolved as a broker does: the topic's override
    (DYNAMIC_TOPIC_CONFIG), else the store's config (STATIC_BROKER_CONFIG), else Kafka's default (DEFAULT_CONFIG)."""
    store_overrides = store_config.overrides
    out = {}
    for key in TOPIC_KEYS:
        spec = CONFIG_KEYS[key]
        synonyms = []
        if key in topic_overrides:
            source, value = "DYNAMIC_TOPIC_CONFIG", topic_overrides[key]
            synonyms.append({"name": key, "value": _render(value), "source": source})
        if key in store_overrides:
            if key not in topic_overrides:
                source, value = "STATIC_BROKER_CONFIG", store_overrides[key]
            synonyms.append({"name": _broker_key(key), "value": _render(store_overrides[key]),
                             "source": "STATIC_BROKER_CONFIG"})
        if key not in topic_overrides and key not in store_overrides:
            source, value = "DEFAULT_CONFIG", spec.default
        if key not in _NO_DEFAULT_SYNONYM:
            synonyms.append({"name": _broker_key(key), "value": _render(spec.default), "source": "DEFAULT_CONFIG"})
        out[key] = {
            "value": _render(value),
            "read_only": False,
            "config_source": source,
            "is_default": source == "DEFAULT_CONFIG",
            "is_sensitive": False,
            "synonyms": synonyms if include_synonyms else [],
            "config_type": _config_type(key),
            "documentation": spec.doc,
        }
    return out


def _keep(entry: dict, config_filter: ConfigFilterType) -> bool:
    modified = entry["config_source"] not in ("DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG",
                                              "DEFAULT_CONFIG")
    if config_filter is ConfigFilterType.MODIFIED:
        return modified
    if config_filter is ConfigFilterType.DEFAULT:
        return not modified
    if config_filter is ConfigFilterType.STATIC:
        return entry["config_source"] == "STATIC_BROKER_CONFIG"
    return True


# ---------------------------------------------------------------------------------------------------- the client

class KafkaAdminClient:
    """kafka-python's KafkaAdminClient over a local data dir: ``KafkaAdminClient(store_or_path, **config)``.

    ``store_or_path`` is a :class:`~kafkalog.LogStore` (used as is and left open by :meth:`close`) or a path (opened
    as a shared-writer LogStore without a maintenance thread, and closed by :meth:`close`). ``config`` accepts
    kafka-python's admin keys (``IGNORED_CONFIGS``: bootstrap_servers, client_id, request_timeout_ms,
    security_protocol, ssl_*, sasl_*, ...) and ignores them; any other key raises InvalidConfigError naming it.
    ``timeout_ms``, ``partition_leader_id`` and ``broker_ids`` arguments are accepted and ignored the same way.

    Thread-safe: one client may be shared by the threads of a process; its calls run one at a time (close waits
    for the call in progress). Process-safe as far as the LogStore is: several processes may run admin clients,
    producers and consumers on one data dir opened in the default shared mode; topic creation is serialized by
    the store's init lock and delete_records by each partition's lock, and a delete_records result is fsynced to
    the log-start-offset checkpoint before it is returned, so it survives a crash (kill -9) of this process.
    """

    def __init__(self, store_or_path, **config):
        for key in config:
            if key not in IGNORED_CONFIGS:
                raise InvalidConfigError(f"unknown KafkaAdminClient config {key!r} (kafkalog accepts kafka-python's "
                                         f"admin keys and ignores them; the store's own config goes to LogStore)")
        self.config = dict(config)
        self._lock = threading.RLock()
        self._closed = False
        self._offset_store = None
        if isinstance(store_or_path, LogStore):
            self._store, self._owns_store = store_or_path, False
        else:
            self._store, self._owns_store = LogStore(store_or_path, maintenance=False), True

    @property
    def store(self) -> LogStore:
        return self._store

    # ------------------------------------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release the client (and the store when the client opened it from a path). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            offsets, self._offset_store = self._offset_store, None
            if offsets is not None and hasattr(offsets, "close"):
                offsets.close()
            if self._owns_store:
                self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("KafkaAdminClient is closed")

    # ------------------------------------------------------------------------------------------------ topics

    def create_topics(self, new_topics, timeout_ms=None, validate_only=False, raise_errors=True,
                      wait_for_metadata=False):
        """Create topics, each on its own: a list of :class:`NewTopic` (kafka-python's too), a list of names, or
        ``{name: {'num_partitions', 'replication_factor', 'assignments', 'configs'}}`` (all optional).

        Per topic: InvalidTopicError (17), TopicAlreadyExistsError (36), InvalidPartitionsError (37),
        InvalidReplicationFactorError (38: replication_factor other than 1 or -1), InvalidReplicaAssignmentError
        (39: a replica other than broker 0), InvalidConfigError (40, naming the key), InvalidRequestError (42: a name
        given twice, or partitions and assignments both given). -1 partitions = the store's ``num.partitions``.
        ``validate_only`` checks everything and creates nothing. Returns kafka-python's create_topics result (see the
        module docstring; ``configs`` holds every topic key of a created topic and is absent after an error); with
        ``raise_errors`` the first error is raised after every other topic was created."""
        if validate_only and wait_for_metadata:
            raise ValueError("validate_only and wait_for_metadata are mutually exclusive")
        with self._lock:
            self._check_open()
            return self._create_topics(_topic_specs(new_topics), validate_only, raise_errors)

    def _create_topics(self, specs, validate_only, raise_errors):
        names = [s[0] for s in specs]
        dupes = {n for n in names if names.count(n) > 1}
        results, errs, seen = [], [], set()
        for name, partitions, replication, assignments, configs in specs:
            if name in seen:
                continue
            seen.add(name)
            entry = {"name": name, "topic_id": NULL_TOPIC_ID, "error_code": 0, "error_message": None,
                     "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1}
            try:
                if name in dupes:
                    raise InvalidRequestError(f"topic {name!r} is given more than once in one create_topics call")
                n, overrides = self._check_new_topic(name, partitions, replication, assignments, configs)
                if validate_only:
                    self._check_absent(name)
                else:
                    self._store.create_topic(name, n, overrides)
            except LogClosedError:
                raise
            except KafkaError as e:
                entry.update(error_code=e.code, error_message=str(e))
                errs.append(e)
            else:
                entry.update(num_partitions=n, replication_factor=1)
                described = _topic_config_entries(self._store.config, overrides, include_synonyms=False)
                entry["configs"] = {k: {"value": v["value"], "read_only": v["read_only"],
                                        "config_source": v["config_source"], "is_sensitive": v["is_sensitive"]}
                                    for k, v in described.items()}
            results.append(entry)
        result = {"topics": results}
        if raise_errors:
            _raise_first(errs, result)
        return result

    def _check_new_topic(self, name, partitions, replication, assignments, configs):
        validate_topic_name(name)
        if isinstance(replication, bool) or not isinstance(replication, int):
            raise InvalidRequestError(f"topic {name!r}: replication_factor must be an integer, got {replication!r}")
        if replication not in (1, -1):
            raise _InvalidReplicationFactorError(
                f"topic {name!r}: replication factor {replication} is larger than the 1 available broker "
                "(kafkalog is one node: use 1 or -1)")
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise InvalidPartitionsError(f"topic {name!r}: num_partitions must be an integer, got {partitions!r}")
        if assignments:
            if partitions != -1 or replication != -1:
                raise InvalidRequestError(f"topic {name!r}: give either replica_assignments or num_partitions and "
                                          "replication_factor (-1 with assignments), not both")
            ids = sorted(assignments)
            if ids != list(range(len(ids))):
                raise _InvalidReplicaAssignmentError(
                    f"topic {name!r}: assigned partitions must be 0..n-1, got {ids}")
            for p, replicas in assignments.items():
                if list(replicas) != [BROKER_ID]:
                    raise _InvalidReplicaAssignmentError(
                        f"topic {name!r} partition {p}: replicas {list(replicas)} (the only broker is {BROKER_ID})")
            n = len(ids)
        elif partitions == -1:
            n = self._store.config["num.partitions"]
        elif partitions < 1:
            raise InvalidPartitionsError(f"topic {name!r}: num_partitions must be at least 1 (or -1 for the "
                                         f"default), got {partitions}")
        else:
            n = partitions
        overrides = Config(configs, scope=TOPIC).overrides  # InvalidConfigError names the key
        return n, overrides

    def _check_absent(self, name):
        existing = self._store.topics()
        if name in existing:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists in {self._store.path}")
        norm = name.replace(".", "_")
        for other in existing:
            if other.replace(".", "_") == norm:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r} "
                                        "('.' and '_' collide in metric names)")

    def delete_topics(self, topics, timeout_ms=None, raise_errors=True):
        """Delete topics and their data, each on its own; an unknown one is UnknownTopicOrPartitionError (3).
        Returns ``{'topics': [{'name', 'topic_id', 'error_code', 'error_message'}]}``; with ``raise_errors`` the
        first error is raised after the other topics were deleted."""
        with self._lock:
            self._check_open()
            results, errs = [], []
            for name in topics:
                entry = {"name": name, "topic_id": NULL_TOPIC_ID, "error_code": 0, "error_message": None}
                try:
                    if not isinstance(name, str):
                        raise UnknownTopicOrPartitionError(f"no topic {name!r}: kafkalog topics have no ids")
                    self._store.delete_topic(name)
                except LogClosedError:
                    raise
                except KafkaError as e:
                    entry.update(error_code=e.code, error_message=str(e))
                    errs.append(e)
                results.append(entry)
            result = {"topics": results}
            if raise_errors:
                _raise_first(errs, result)
            return result

    def list_topics(self):
        """Every topic name, internal ones (``__consumer_offsets``) included as kafka-python does; sorted."""
        with self._lock:
            self._check_open()
            return list(self._store.topics())

    def describe_topics(self, topics=None):
        """kafka-python's metadata topic dicts for ``topics`` (all when None, sorted), in the order asked. Broker 0
        leads every partition and is its only replica and in-sync replica. An unknown topic is reported, not raised
        (as a broker does): ``error_code`` 3 and no partitions."""
        with self._lock:
            self._check_open()
            names = self._store.topics() if topics is None else list(topics)
            out = []
            for name in names:
                entry = {"error_code": 0, "name": name, "topic_id": NULL_TOPIC_ID,
                         "is_internal": name in INTERNAL_TOPICS, "partitions": [],
                         "authorized_operations": list(TOPIC_OPERATIONS)}
                try:
                    n = self._store.partitions_for(name) if isinstance(name, str) else 0
                    if not n:
                        raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
                except UnknownTopicOrPartitionError as e:
                    entry.update(error_code=e.code, authorized_operations=None)
                    out.append(entry)
                    continue
                entry["partitions"] = [
                    {"error_code": 0, "partition_index": p, "leader_id": BROKER_ID, "leader_epoch": 0,
                     "replica_nodes": [BROKER_ID], "isr_nodes": [BROKER_ID], "offline_replicas": []}
                    for p in range(n)]
                out.append(entry)
            return out

    # ------------------------------------------------------------------------------------------------ configs

    def describe_configs(self, config_resources, include_synonyms=False, config_filter="modified"):
        """Topic configs, kafka-python's shape: ``{'topic': {name: {key: entry}}}``.

        Each entry has the value (a string, as on the wire), ``config_source`` (DYNAMIC_TOPIC_CONFIG for the topic's
        overrides, STATIC_BROKER_CONFIG for a value from the store's config, DEFAULT_CONFIG for Kafka's default),
        ``is_default``, ``config_type`` and ``documentation``. ``config_filter`` is kafka-python's: 'modified' (its
        default) returns only the topic's overrides, 'all' every topic key. A resource's ``configs`` (keys) narrows
        the keys; None means all. Only TOPIC resources exist here (others: InvalidRequestError); an unknown topic
        raises UnknownTopicOrPartitionError."""
        flt = _enum(ConfigFilterType, config_filter, "config_filter")
        with self._lock:
            self._check_open()
            out: dict = {}
            for res in config_resources:
                rtype, name = self._topic_resource(res)
                overrides = self._store.topic_config(name).overrides
                entries = _topic_config_entries(self._store.config, overrides, include_synonyms)
                wanted = res.configs
                if wanted is not None:
                    keys = {k.replace("_", ".") for k in (wanted.keys() if isinstance(wanted, dict) else wanted)}
                    entries = {k: v for k, v in entries.items() if k in keys}
                out.setdefault(rtype.name.lower(), {})[name] = {k: v for k, v in entries.items() if _keep(v, flt)}
            return out

    def _topic_resource(self, res):
        rtype = _resource_type(res.resource_type)
        if rtype is not ConfigResourceType.TOPIC:
            raise InvalidRequestError(f"{rtype.name} config resources do not exist in kafkalog (only TOPIC)")
        return rtype, res.name

    def alter_configs(self, config_resources, validate_only=False, raise_on_unknown=True, incremental=None):
        """Change topic configs: each resource's ``configs`` maps a key to a value (SET) or to ``(op, value)``
        with op SET, DELETE (back to the store's/Kafka's default), APPEND or SUBTRACT (cleanup.policy, a list).
        Keys not named keep their overrides (kafka-python's incremental behaviour, also what it emulates with
        ``incremental=False``, which only allows SET). The new overrides are persisted with the topic and applied to
        this process's open logs.

        ``raise_on_unknown``: an unknown key raises InvalidConfigError naming it before anything changes. Otherwise
        each resource gets ``'OK'`` or its error string (unknown topic, invalid value...), as in kafka-python:
        ``{'topic': {name: 'OK' | '[Error 40] InvalidConfigError: ...'}}``."""
        with self._lock:
            self._check_open()
            ops = []
            for res in config_resources:
                rtype, name = self._topic_resource(res)
                ops.append((rtype, name, _alter_entries(res.configs, incremental)))
            if raise_on_unknown:
                for _, name, entries in ops:
                    for key, _op, _value in entries:
                        if CONFIG_KEYS.get(key) is None or CONFIG_KEYS[key].scope != TOPIC:
                            raise InvalidConfigError(f"unknown topic config key {key!r} for topic {name!r}")
            out: dict = {}
            for rtype, name, entries in ops:
                try:
                    self._alter_topic(name, entries, validate_only)
                except LogClosedError:
                    raise
                except KafkaError as e:
                    result = _error_string(e)
                else:
                    result = "OK"
                out.setdefault(rtype.name.lower(), {})[name] = result
            return out

    def reset_configs(self, config_resources, validate_only=False, raise_on_unknown=True, incremental=None):
        """Reset keys to their defaults (DELETE): a resource's ``configs`` lists the keys (a dict's keys count);
        none resets every override of the topic. Returns what alter_configs returns."""
        resources = []
        with self._lock:
            self._check_open()
            for res in config_resources:
                rtype, name = self._topic_resource(res)
                keys = list(res.configs or [])
                if not keys:
                    try:
                        keys = list(self._store.topic_config(name).overrides)
                    except UnknownTopicOrPartitionError:
                        keys = []
                resources.append(ConfigResource(rtype, name, {k: (AlterConfigOp.DELETE, None) for k in keys}))
            return self.alter_configs(resources, validate_only, raise_on_unknown, incremental=True)

    def _alter_topic(self, name, entries, validate_only):
        overrides = dict(self._store.topic_config(name).overrides)  # UnknownTopicOrPartitionError
        for key, op, value in entries:
            if op is AlterConfigOp.SET:
                overrides[key] = value
            elif op is AlterConfigOp.DELETE:
                overrides.pop(key, None)
            else:
                if _config_type(key) != "LIST":
                    raise InvalidConfigError(f"{op.name} applies to list configs only; {key!r} is not a list")
                current = overrides[key] if key in overrides else self._store.topic_config(name)[key]
                items = [v for v in str(current).replace(" ", "").split(",") if v]
                for v in str(value).replace(" ", "").split(","):
                    if op is AlterConfigOp.APPEND and v and v not in items:
                        items.append(v)
                    elif op is AlterConfigOp.SUBTRACT and v in items:
                        items.remove(v)
                if not items:
                    raise InvalidConfigError(f"{key!r} cannot be empty")
                overrides[key] = ",".join(items)
        validated = Config(overrides, scope=TOPIC).overrides  # InvalidConfigError names the key
        if validate_only:
            return
        alter = getattr(self._store, "alter_topic_config", None)
        if alter is None:
            raise UnsupportedVersionError("this kafkalog's LogStore cannot change a topic's config "
                                          "(LogStore.alter_topic_config is missing)")
        alter(name, validated)

    # ------------------------------------------------------------------------------------------------ records

    def delete_records(self, records_to_delete, timeout_ms=None, partition_leader_id=None, raise_errors=True):
        """KIP-107 DeleteRecords: ``{TopicPartition: offset}``; each partition's log start offset moves up to
        ``offset`` (-1 = the high watermark); records below it are never returned again. Each partition is handled
        on its own. Per-partition errors: OffsetOutOfRangeError (1: above the high watermark, or below -1),
        UnknownTopicOrPartitionError (3), PolicyViolationError (44: cleanup.policy without 'delete'), and the
        result's ``low_watermark`` is -1 for them.

        Returns kafka-python's ``{TopicPartition: {'partition_index', 'low_watermark', 'error_code'}}``, where
        low_watermark is the partition's new log start offset (at least its old one: deleting below it is a no-op).
        With ``raise_errors`` (the default, as kafka-python always does) errors are raised after every partition
        was handled: one error as its own class; several as that class when they share it, else as KafkaError
        (kafka-python: BrokerResponseError), naming each partition. The exception carries the full result as
        ``exc.results``. A result is fsynced to the log-start-offset checkpoint before it is returned."""
        with self._lock:
            self._check_open()
            results, errs = {}, []
            for tp, offset in records_to_delete.items():
                tp = TopicPartition(*tp)
                try:
                    if isinstance(offset, bool) or not isinstance(offset, int):
                        raise OffsetOutOfRangeError(f"delete-records offset {offset!r} for {tp.topic}-"
                                                    f"{tp.partition} is not an integer")
                    if offset < -1:
                        raise OffsetOutOfRangeError(f"delete-records offset {offset} for {tp.topic}-{tp.partition} "
                                                    "is out of range (use -1 for the high watermark)")
                    low = self._store.log(tp.topic, tp.partition).delete_records_before(offset)
                except LogClosedError:
                    raise
                except KafkaError as e:
                    results[tp] = {"partition_index": tp.partition, "low_watermark": -1, "error_code": e.code}
                    errs.append((tp, e))
                else:
                    results[tp] = {"partition_index": tp.partition, "low_watermark": low, "error_code": 0}
            if raise_errors and errs:
                if len(errs) == 1:
                    exc = errs[0][1]
                else:
                    classes = {type(e) for _, e in errs}
                    cls = classes.pop() if len(classes) == 1 else KafkaError
                    exc = cls("errors deleting records: " + ", ".join(
                        f"{tp.topic}(partition={tp.partition}): {type(e).__name__}: {e}" for tp, e in errs))
                exc.results = results
                raise exc
            return results

    # ------------------------------------------------------------------------------------------------ groups

    def _offsets(self):
        if self._offset_store is None:
            from ..storage.offsets import OffsetStore  # written alongside the consumer groups; imported on first use
            self._offset_store = OffsetStore(self._store)
        return self._offset_store

    def _group_ids(self) -> list[str]:
        """Groups with committed offsets or with members (consumer groups of any process on this store)."""
        from .group import known_groups
        return sorted(set(self._offsets().groups()) | set(known_groups(self._store.path)))

    def list_consumer_groups(self, broker_ids=None):
        """kafka-python 2.x: ``[(group_id, protocol_type)]`` of the groups with committed offsets or members."""
        with self._lock:
            self._check_open()
            return [(g, PROTOCOL_TYPE) for g in self._group_ids()]

    def list_groups(self, broker_ids=None, states_filter=None, types_filter=None):
        """kafka-python 3.x: ``[{'group_id', 'protocol_type', 'group_state', 'group_type'}]``; group_state is
        'Empty', 'PreparingRebalance' or 'Stable' (KIP-518 names), group_type 'classic'. ``states_filter`` keeps
        the groups in those states (case-insensitive); a types_filter other than 'classic'/'consumer' is
        refused (KIP-848 groups do not exist here)."""
        from .group import describe_group
        if types_filter and any(str(t).lower() not in ("classic", "consumer") for t in types_filter):
            raise UnsupportedVersionError(f"group types {sorted(types_filter)}: only classic groups exist here")
        wanted = {str(x).lower() for x in states_filter} if states_filter else None
        with self._lock:
            self._check_open()
            out = []
            for g in self._group_ids():
                state = describe_group(self._store, g)["state"]
                if wanted is None or state.lower() in wanted:
                    out.append({"group_id": g, "protocol_type": PROTOCOL_TYPE, "group_state": state,
                                "group_type": "classic"})
            return out

    def describe_groups(self, group_ids, group_coordinator_id=None, include_authorized_operations=False):
        """kafka-python 3.x: ``{group_id: {...}}`` shaped like a DescribeGroups response: error_code, group_id,
        group_state ('Dead' for an unknown group), protocol_type, protocol_data (the assignor), members with
        member_id, group_instance_id, client_id, client_host ('pid:<n>'), member_metadata {'topics'} and
        member_assignment {'assigned_partitions': [TopicPartition]}."""
        from .group import describe_group
        with self._lock:
            self._check_open()
            known = set(self._group_ids())
            out = {}
            for g in group_ids:
                d = describe_group(self._store, g)
                members = [{"member_id": m["member_id"], "group_instance_id": None, "client_id": m["client_id"],
                            "client_host": f"pid:{m['pid']}", "member_metadata": {"topics": m["topics"]},
                            "member_assignment": {"assigned_partitions": m["assignment"]}}
                           for m in d["members"]]
                out[g] = {"error_code": 0, "group_id": g,
                          "group_state": d["state"] if g in known else "Dead",
                          "protocol_type": PROTOCOL_TYPE if g in known else "",
                          "protocol_data": d["protocol"] or "", "members": members,
                          "authorized_operations": None}
            return out

    def list_consumer_group_offsets(self, group_id, group_coordinator_id=None, partitions=None):
        """kafka-python 2.x: ``{TopicPartition: OffsetAndMetadata}`` committed by ``group_id``: all of them, or the
        ``partitions`` asked for, where one without a commit reads ``OffsetAndMetadata(-1, '', None)``. An unknown
        group has no offsets ({}), as on a broker."""
        with self._lock:
            self._check_open()
            return self._group_offsets(group_id, partitions)

    def list_group_offsets(self, group_specs):
        """kafka-python 3.x: ``{group_id: {TopicPartition: OffsetAndMetadata}}`` for a group id, a list of them, or
        ``{group_id: [TopicPartition] | None}``."""
        if isinstance(group_specs, str):
            group_specs = {group_specs: None}
        elif not isinstance(group_specs, dict):
            group_specs = {g: None for g in group_specs}
        if not group_specs:
            raise ValueError("Empty group_specs!")
        with self._lock:
            self._check_open()
            return {g: self._group_offsets(g, parts) for g, parts in group_specs.items()}

    def _group_offsets(self, group_id, partitions):
        committed = {TopicPartition(*tp): om for tp, om in self._offsets().committed_all(group_id).items()}
        if partitions is None:
            return committed
        return {TopicPartition(*tp): committed.get(TopicPartition(*tp), OffsetAndMetadata(-1, "", None))
                for tp in partitions}

    def __repr__(self):
        return f"KafkaAdminClient({str(self._store.path)!r})"


# ---------------------------------------------------------------------------------------------------- inputs

def _topic_specs(new_topics):
    """(name, num_partitions, replication_factor, assignments, configs) for each form kafka-python accepts."""
    if isinstance(new_topics, (str, NewTopic)) or hasattr(new_topics, "num_partitions"):
        new_topics = [new_topics]
    specs = []
    if isinstance(new_topics, dict):
        for name, data in new_topics.items():
            data = data or {}
            specs.append((name, data.get("num_partitions", -1), data.get("replication_factor", -1),
                          dict(data.get("assignments") or {}), dict(data.get("configs") or {})))
    else:
        for t in new_topics:
            if isinstance(t, str):
                specs.append((t, -1, -1, {}, {}))
            elif hasattr(t, "name") and hasattr(t, "num_partitions"):  # ours or kafka-python's NewTopic
                specs.append((t.name, t.num_partitions, t.replication_factor,
                              dict(getattr(t, "replica_assignments", None) or {}),
                              dict(getattr(t, "topic_configs", None) or {})))
            else:
                raise TypeError(f"create_topics: expected NewTopic objects or topic names, got {t!r}")
    if not specs:
        raise ValueError(f"No valid topics found in new_topics: {new_topics}")
    return specs


def _alter_entries(configs, incremental):
    """[(normalized key, AlterConfigOp, value)] from ``{key: value | (op, value)}``."""
    if not configs:
        return []
    if not isinstance(configs, dict):
        raise TypeError("alter_configs requires configs as a dict of {key: (op, value)} or {key: value}")
    out = []
    for key, op_value in configs.items():
        if isinstance(op_value, tuple):
            op, value = op_value
            op = _enum(AlterConfigOp, op, "config operation")
        else:
            op, value = AlterConfigOp.SET, op_value
        if incremental is False and op is not AlterConfigOp.SET:
            raise ValueError(f"Non-incremental AlterConfigsRequest does not support operation {op.name} (SET only)")
        if not isinstance(key, str):
            raise InvalidConfigError(f"config key {key!r} is not a string")
        out.append((key.replace("_", "."), op, value))
    return out
