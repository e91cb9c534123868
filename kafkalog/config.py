"""One ``Config``: every key declared once with its type, Kafka default, validator and doc (like Kafka's ConfigDef).

Keys are Kafka's (``segment.bytes``, ``retention.ms``); callers may spell them with underscores
(``segment_bytes``). Broker-level synonyms (``log.segment.bytes``, ``log.retention.hours``...) are accepted in a
store's config and map to the topic key. Unknown keys and invalid values raise ``InvalidConfigError`` naming the key
and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

TOPIC = "topic"  # per-topic key: stored with the topic, overridable per topic
STORE = "store"  # per-store key: how the store runs (checkpoints, maintenance), not per topic
BROKER = "broker"  # server.properties key of the broker facade (kafkalog serve); a store ignores it


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: type
    default: Any
    doc: str
    scope: str = TOPIC
    low: int | None = None
    high: int | None = None
    choices: tuple | None = None
    validator: Callable[[Any], bool] | None = None
    expects: str = "invalid value"  # what a value refused by the validator should have been

    def parse(self, value):
        if self.type is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false"):
                    raise InvalidConfigError(f"{self.name}={value!r}: expected true or false")
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise InvalidConfigError(f"{self.name}={value!r}: expected a boolean")
            return value
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise InvalidConfigError(f"{self.name}={value!r}: expected an integer")
            try:
                v = int(value)
            except ValueError:
                raise InvalidConfigError(f"{self.name}={value!r}: expected an integer") from None
            if (self.low is not None and v < self.low) or (self.high is not None and v > self.high):
                raise InvalidConfigError(f"{self.name}={v}: must be in [{self.low}, {self.high}]")
            return v
        v = str(value)
        if self.choices and v not in self.choices:
            raise InvalidConfigError(f"{self.name}={v!r}: must be one of {', '.join(self.choices)}")
        if self.validator and not self.validator(v):
            raise InvalidConfigError(f"{self.name}={v!r}: {self.expects}")
        return v


def _keys(*keys: ConfigKey) -> dict[str, ConfigKey]:
    out: dict[str, ConfigKey] = {}
    for k in keys:
        if k.name in out:
            raise RuntimeError(f"config key {k.name} declared twice")
        out[k.name] = k
    return out


CONFIG_KEYS = _keys(
    ConfigKey("segment.bytes", int, 1073741824, "Roll a new segment before the .log would exceed this size.",
              low=14, high=INT_MAX),
    ConfigKey("segment.ms", int, 604800000,
              "Roll when the first batch of the active segment is this much older (in record time) than the append.",
              low=1, high=LONG_MAX),
    ConfigKey("segment.jitter.ms", int, 0, "Random jitter subtracted from segment.ms per segment.", low=0,
              high=LONG_MAX),
    ConfigKey("segment.index.bytes", int, 10485760, "Preallocated size of each segment's index files.", low=4,
              high=INT_MAX),
    ConfigKey("index.interval.bytes", int, 4096, "Bytes of log between two offset/time index entries.", low=0,
              high=INT_MAX),
    ConfigKey("retention.ms", int, 604800000,
              "Delete a segment once its largest record timestamp is older than this; -1 keeps forever.",
              low=-1, high=LONG_MAX),
    ConfigKey("retention.bytes", int, -1, "Delete old segments while the partition exceeds this size; -1 = no limit.",
              low=-1, high=LONG_MAX),
    ConfigKey("file.delete.delay.ms", int, 60000,
              "How long a removed segment stays as <file>.deleted before it is unlinked.", low=0, high=LONG_MAX),
    ConfigKey("flush.messages", int, LONG_MAX, "fsync after this many appended records (1 = every append).", low=1,
              high=LONG_MAX),
    ConfigKey("flush.ms", int, LONG_MAX, "fsync when the last flush is older than this.", low=0, high=LONG_MAX),
    ConfigKey("max.message.bytes", int, 1048588, "Largest record batch accepted (after compression).", low=0,
              high=INT_MAX),
    ConfigKey("message.timestamp.type", str, "CreateTime", "Record timestamps: the producer's or the append time.",
              choices=("CreateTime", "LogAppendTime")),
    ConfigKey("message.timestamp.before.max.ms", int, LONG_MAX,
              "Reject CreateTime timestamps older than now minus this.", low=0, high=LONG_MAX),
    ConfigKey("message.timestamp.after.max.ms", int, 3600000,
              "Reject CreateTime timestamps newer than now plus this (Kafka 4.0 default: 1 hour).", low=0,
              high=LONG_MAX),
    ConfigKey("compression.type", str, "producer",
              "Codec of batches built by append/append_batch; 'producer' keeps what append_records receives.",
              choices=("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")),
    ConfigKey("cleanup.policy", str, "delete", "'delete' enables retention and delete-before; 'compact' runs the log "
              "cleaner (the latest record per key is kept below the active segment) and refuses records without a "
              "key (INVALID_RECORD), as Kafka does; 'compact,delete' does both.",
              validator=lambda v: set(v.replace(" ", "").split(",")) <= {"delete", "compact"}),
    ConfigKey("preallocate", bool, False, "The active segment's .log keeps up to 1 MiB of zero-written room past its "
              "last batch (Kafka's setLength leaves a sparse file; zeros written once let each durable append's "
              "fdatasync skip the size change); trimmed at roll. DurableQueue topics are made with it on."),
    # Kafka topic keys that have no effect on a single node; accepted so that apps and tools that set them
    # (kafka-python's NewTopic, kafka-topics.sh habits) work unchanged.
    ConfigKey("min.insync.replicas", int, 1, "Accepted for compatibility; one node is always in sync.", low=1,
              high=INT_MAX),
    ConfigKey("unclean.leader.election.enable", bool, False, "Accepted for compatibility; no replicas."),
    ConfigKey("leader.replication.throttled.replicas", str, "", "Accepted for compatibility; one node replicates "
              "nothing to throttle (kafka-reassign-partitions sets and clears it)."),
    ConfigKey("follower.replication.throttled.replicas", str, "", "Accepted for compatibility; one node replicates "
              "nothing to throttle (kafka-reassign-partitions sets and clears it)."),
    ConfigKey("delete.retention.ms", int, 86400000, "Compaction: a tombstone (null value) is kept this long after "
              "the cleaning that first kept it (KIP-534's delete horizon, stamped into its batch).", low=0,
              high=LONG_MAX),
    ConfigKey("min.compaction.lag.ms", int, 0, "Compaction: a segment holding a record newer than this is not "
              "cleaned yet.", low=0, high=LONG_MAX),
    ConfigKey("max.compaction.lag.ms", int, LONG_MAX, "Compaction: clean whatever the dirty ratio once the first "
              "dirty record is older than this (segment.ms rolls make the active segment's records cleanable).",
              low=1, high=LONG_MAX),
    ConfigKey("min.cleanable.dirty.ratio", str, "0.5", "Compaction: clean when the bytes not cleaned yet are at "
              "least this share of the log below the active segment.",
              validator=lambda v: v.replace(".", "", 1).isdigit() and 0 <= float(v) <= 1,
              expects="must be a number in [0, 1]"),
    ConfigKey("offsets.topic.num.partitions", int, 1, "Partitions of __consumer_offsets when kafkalog creates it "
              "(Kafka: 50, one coordinator per partition leader; a data dir is one node).", scope=STORE, low=1,
              high=INT_MAX),
    ConfigKey("offset.metadata.max.bytes", int, 4096, "Longest metadata string of an offset commit.", scope=STORE,
              low=0, high=INT_MAX),
    ConfigKey("offsets.snapshot.interval.records", int, 1000, "Snapshot __consumer_offsets (and delete the "
              "records below it) after this many offset records.", scope=STORE, low=1, high=INT_MAX),
    ConfigKey("offsets.snapshot.interval.bytes", int, 1048576, "... or after this many bytes of keys and values.",
              scope=STORE, low=1, high=LONG_MAX),
    ConfigKey("log.retention.check.interval.ms", int, 300000, "How often the store runs retention.", scope=STORE,
              low=1, high=LONG_MAX),
    ConfigKey("log.cleaner.enable", bool, True, "Run the log cleaner for compacted topics in the maintenance thread.",
              scope=STORE),
    ConfigKey("log.cleaner.threads", int, 1, "0 turns the cleaner off, as in Kafka; any other count runs one cleaner "
              "per process (each partition is cleaned by one process at a time).", scope=STORE, low=0, high=INT_MAX),
    ConfigKey("log.cleaner.dedupe.buffer.size", int, 134217728, "Most memory of one cleaning round's key -> offset "
              "map (24 bytes a slot); the map is sized to the dirty records, up to this.", scope=STORE,
              low=1024, high=LONG_MAX),
    ConfigKey("log.cleaner.io.buffer.load.factor", str, "0.9", "Largest fill of the cleaner's offset map.",
              scope=STORE, validator=lambda v: v.replace(".", "", 1).isdigit() and 0 < float(v) <= 1,
              expects="must be a number in (0, 1]"),
    ConfigKey("log.cleaner.backoff.ms", int, 15000, "How often the maintenance thread looks for logs to clean.",
              scope=STORE, low=1, high=LONG_MAX),
    ConfigKey("log.flush.scheduler.interval.ms", int, 1000,
              "How often the store checks flush.ms (Kafka's default is never; ours: every second).", scope=STORE,
              low=1, high=LONG_MAX),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", int, 60000,
              "How often the recovery-point checkpoint is written (it is also written at every flush and close).",
              scope=STORE, low=1, high=LONG_MAX),
    ConfigKey("num.partitions", int, 1, "Partitions of a topic created without an explicit count.", scope=STORE,
              low=1, high=INT_MAX),
    ConfigKey("lock.timeout.ms", int, 30000, "How long an append waits for another process's partition lock.",
              scope=STORE, low=0, high=LONG_MAX),
    # broker facade (kafkalog serve / kafkalog.Broker): Kafka's server.properties keys
    ConfigKey("listeners", str, "PLAINTEXT://127.0.0.1:9092", "Where the broker listens: [PLAINTEXT://]host:port "
              "(port 0 picks a free port).", scope=BROKER),
    ConfigKey("advertised.listeners", str, "", "host:port clients are told to connect to (default: the listener's "
              "address).", scope=BROKER),
    ConfigKey("log.dirs", str, "", "The data dir (one: a kafkalog data dir is one node's log dir).", scope=BROKER),
    ConfigKey("log.dir", str, "", "Synonym of log.dirs.", scope=BROKER),
    ConfigKey("node.id", int, 1, "The broker's node id in Metadata and FindCoordinator answers.", scope=BROKER,
              low=0, high=INT_MAX),
    ConfigKey("broker.id", int, -1, "Synonym of node.id (when >= 0).", scope=BROKER, low=-1, high=INT_MAX),
    ConfigKey("auto.create.topics.enable", bool, True, "Create a topic with num.partitions partitions when a "
              "client asks Metadata for an unknown one (and allows auto-creation).", scope=BROKER),
    ConfigKey("delete.topic.enable", bool, True, "Whether DeleteTopics may delete topics.", scope=BROKER),
    ConfigKey("socket.request.max.bytes", int, 104857600, "Largest request frame accepted; a bigger size prefix "
              "closes the connection before anything is allocated.", scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("group.initial.rebalance.delay.ms", int, 3000, "How long the first member of an empty group waits "
              "for others before the group's first generation is answered.", scope=BROKER, low=0, high=INT_MAX),
    ConfigKey("group.min.session.timeout.ms", int, 6000, "Smallest session timeout a member may ask for.",
              scope=BROKER, low=0, high=INT_MAX),
    ConfigKey("group.max.session.timeout.ms", int, 1800000, "Largest session timeout a member may ask for.",
              scope=BROKER, low=0, high=INT_MAX),
    ConfigKey("group.consumer.session.timeout.ms", int, 45000, "KIP-848 consumer groups: a member silent this "
              "long is removed.", scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("group.consumer.heartbeat.interval.ms", int, 5000, "KIP-848 consumer groups: the heartbeat interval "
              "members are told.", scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("group.consumer.max.size", int, INT_MAX, "KIP-848 consumer groups: the most members a group takes.",
              scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("group.consumer.migration.policy", str, "bidirectional", "KIP-848's online migration between "
              "classic and consumer groups: bidirectional (both ways), upgrade (a classic group becomes a consumer "
              "group when a ConsumerGroupHeartbeat joins it), downgrade (a consumer group whose last "
              "consumer-protocol member leaves becomes a classic group), disabled (neither).", scope=BROKER,
              validator=lambda v: v.strip().lower() in ("bidirectional", "upgrade", "downgrade", "disabled"),
              expects="one of bidirectional, upgrade, downgrade, disabled"),
    ConfigKey("group.consumer.assignors", str, "uniform,range", "KIP-848 consumer groups: the server-side assignors "
              "(uniform, range), the first the default.", scope=BROKER,
              validator=lambda v: bool(v.strip()) and all(a.strip() in ("uniform", "range")
                                                          for a in v.split(",") if a.strip()),
              expects="a list of uniform, range"),
    ConfigKey("share.version", int, 1, "The finalized level of the share.version feature (KIP-932 share groups) "
              "that ApiVersions advertises: 1 = share groups served (ShareGroupHeartbeat, ShareGroupDescribe, "
              "ShareFetch, ShareAcknowledge advertised), 0 = not served (those APIs are not advertised). Kafka 4.4's "
              "level 2 (dead-letter queues) is not served.", scope=BROKER, low=0, high=1),
    ConfigKey("group.share.max.size", int, 200, "Share groups: the most members a group takes.", scope=BROKER,
              low=1, high=1000),
    ConfigKey("group.share.session.timeout.ms", int, 45000, "Share groups: a member silent this long is removed "
              "(what it acquired goes back).", scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("group.share.heartbeat.interval.ms", int, 5000, "Share groups: the heartbeat interval members are "
              "told.", scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("group.share.record.lock.duration.ms", int, 30000, "Share groups: how long a member holds the "
              "records it acquired (the acquisition lock) before they are delivered again.", scope=BROKER,
              low=1, high=3600000),
    ConfigKey("group.share.delivery.count.limit", int, 5, "Share groups: a record delivered this many times and "
              "not accepted is archived (never delivered again).", scope=BROKER, low=2, high=10),
    ConfigKey("group.share.partition.max.record.locks", int, 2000, "Share groups: the most records of one "
              "share-partition acquired at once.", scope=BROKER, low=100, high=10000),
    ConfigKey("group.share.max.share.sessions", int, 2000, "Share groups: the most share sessions this broker "
              "keeps.", scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("share.auto.offset.reset", str, "latest", "Share groups: where a share-partition with no state "
              "starts (latest, earliest), for the groups that do not set it as a group config (Kafka has no such "
              "server key: its groups start at latest unless their group config says otherwise).", scope=BROKER,
              validator=lambda v: v in ("latest", "earliest"), expects="latest or earliest"),
    # the bounds of the group configs (IncrementalAlterConfigs on a GROUP), Kafka 4.4's keys and defaults: a value
    # outside them is refused, and a bound changed later caps the value in force
    *(ConfigKey(f"group.{kind}.{side}.{what}", int, default, f"The {side}imum value of the group config "
                f"{kind}.{what} (IncrementalAlterConfigs on a GROUP resource).", scope=BROKER, low=low, high=high)
      for kind, what, side, default, low, high in (
          ("consumer", "session.timeout.ms", "min", 45000, 1, INT_MAX),
          ("consumer", "session.timeout.ms", "max", 60000, 1, INT_MAX),
          ("consumer", "heartbeat.interval.ms", "min", 5000, 1, INT_MAX),
          ("consumer", "heartbeat.interval.ms", "max", 15000, 1, INT_MAX),
          ("share", "session.timeout.ms", "min", 45000, 1, INT_MAX),
          ("share", "session.timeout.ms", "max", 60000, 1, INT_MAX),
          ("share", "heartbeat.interval.ms", "min", 5000, 1, INT_MAX),
          ("share", "heartbeat.interval.ms", "max", 15000, 1, INT_MAX),
          ("share", "record.lock.duration.ms", "min", 15000, 1000, 3600000),
          ("share", "record.lock.duration.ms", "max", 60000, 1000, 3600000),
          ("share", "delivery.count.limit", "min", 2, 2, 10),
          ("share", "delivery.count.limit", "max", 10, 2, 10),
          ("share", "partition.max.record.locks", "min", 100, 100, 10000),
          ("share", "partition.max.record.locks", "max", 4000, 100, 10000))),
    ConfigKey("connections.max.idle.ms", int, 600000, "Close connections idle for this long.", scope=BROKER,
              low=1, high=LONG_MAX),
    ConfigKey("queued.max.request.bytes", int, 104857600, "Memory for request frames being received or served, "
              "across all connections (Kafka's key; here bounded by default): a frame over 64 KiB reserves its size "
              "before its buffer exists, and its connection stops reading until the memory is there.",
              scope=BROKER, low=65536, high=LONG_MAX),
    ConfigKey("request.receive.timeout.ms", int, 30000, "kafkalog's own: a request frame must arrive whole "
              "within this time from its first byte, or from the moment queued.max.request.bytes granted its "
              "memory; a slower sender is disconnected, so trickling frames cannot hold memory.", scope=BROKER, low=1,
              high=INT_MAX),
    ConfigKey("max.broker.partitions", int, 10000, "KIP-578: the most partitions this broker hosts; a CreateTopics "
              "(or an auto-create) past it is refused with POLICY_VIOLATION before anything touches the disk.",
              scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("max.incremental.fetch.session.cache.slots", int, 1000, "Incremental fetch sessions (KIP-227) the "
              "broker keeps (8 shards); 0 disables them: every fetch is answered sessionless.", scope=BROKER,
              low=0, high=INT_MAX),
    # client quotas (KIP-13): bytes per second per client id; empty = no quota
    ConfigKey("quota.producer.default", str, "", "Produce byte rate every client id may use (e.g. 1048576, 500K, "
              "2M; empty: no quota).", scope=BROKER),
    ConfigKey("quota.consumer.default", str, "", "Fetch byte rate every client id may use (empty: no quota).",
              scope=BROKER),
    ConfigKey("quota.producer.override", str, "", "Per client id produce rates: clientA:4M,clientB:10M.",
              scope=BROKER),
    ConfigKey("quota.consumer.override", str, "", "Per client id fetch rates: clientC:3M,clientD:5M.", scope=BROKER),
    ConfigKey("quota.window.num", int, 11, "Samples a quota's rate is measured over.", scope=BROKER, low=2,
              high=1000),
    ConfigKey("quota.window.size.seconds", int, 1, "Length of one quota sample.", scope=BROKER, low=1, high=3600),
    # authentication (SASL on a SASL_PLAINTEXT / SASL_SSL listener) and authorization (ACLs)
    ConfigKey("sasl.enabled.mechanisms", str, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms a SASL "
              "listener offers (users: kafkalog users).", scope=BROKER,
              validator=lambda v: bool(v) and set(m.strip() for m in v.split(",")) <= {
                  "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}),
    ConfigKey("authorizer.class.name", str, "", "Non-empty: every request is checked against the ACLs "
              "(kafkalog acls); Kafka's StandardAuthorizer/AclAuthorizer names are accepted.", scope=BROKER),
    ConfigKey("super.users", str, "", "Principals allowed everything: User:alice;User:bob.", scope=BROKER),
    ConfigKey("allow.everyone.if.no.acl.found", bool, False, "With an authorizer: allow access to a resource that "
              "has no ACL at all.", scope=BROKER),
    ConfigKey("ssl.keystore.location", str, "", "TLS listener (SSL:// or SASL_SSL://): a PEM file with the "
              "certificate chain (and the key, unless ssl.key.location).", scope=BROKER),
    ConfigKey("ssl.key.location", str, "", "TLS listener: the private key PEM file (kafkalog's key).",
              scope=BROKER),
    ConfigKey("ssl.key.password", str, "", "Password of the private key, if encrypted.", scope=BROKER),
    ConfigKey("ssl.keystore.type", str, "PEM", "Only PEM is supported.", scope=BROKER, choices=("PEM",)),
    # accepted so a Kafka server.properties works unchanged; one node has nothing to replicate or balance
    ConfigKey("default.replication.factor", int, 1, "Accepted for compatibility (one node).", scope=BROKER, low=1,
              high=1),
    ConfigKey("offsets.topic.replication.factor", int, 1, "Accepted for compatibility (one node).", scope=BROKER,
              low=1, high=INT_MAX),
    ConfigKey("transaction.state.log.replication.factor", int, 1, "Accepted for compatibility.", scope=BROKER,
              low=1, high=INT_MAX),
    ConfigKey("transaction.state.log.min.isr", int, 1, "Accepted for compatibility.", scope=BROKER, low=1,
              high=INT_MAX),
    ConfigKey("transaction.max.timeout.ms", int, 900000, "The largest transaction.timeout.ms a transactional "
              "producer may ask for (InitProducerId answers INVALID_TRANSACTION_TIMEOUT above it).", scope=BROKER,
              low=1, high=INT_MAX),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10000,
              "How often the transaction coordinator aborts transactions open longer than their timeout.",
              scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("transaction.version", int, 2, "The finalized level of the transaction.version feature that "
              "ApiVersions advertises (KIP-584), as a Kafka 4.4 cluster's: 2 = transactions v2 (KIP-890 part 2: "
              "Java 4.4 and franz-go clients then add partitions through Produce v12+ and bump the epoch at every "
              "EndTxn v5), 1 = transactions v1 with KIP-890 part 1's verification, 0 = as a Kafka downgraded to 0 "
              "(__transaction_state values in version 0; version 1 from level 1). Clients choose their transaction "
              "protocol from it; every level serves every client's requests.", scope=BROKER, low=0, high=2),
    ConfigKey("transactional.id.expiration.ms", int, 604800000, "A transactional id whose producer sent nothing for "
              "this long (no transaction open) is forgotten: its next InitProducerId gets a new producer id.",
              scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("transaction.state.log.num.partitions", int, 50, "Accepted for compatibility: kafkalog creates "
              "__transaction_state with one partition (one node).", scope=BROKER, low=1, high=INT_MAX),
    ConfigKey("num.network.threads", int, 3, "Accepted for compatibility (one asyncio loop).", scope=BROKER, low=1,
              high=INT_MAX),
    ConfigKey("num.io.threads", int, 8, "Accepted for compatibility (one asyncio loop).", scope=BROKER, low=1,
              high=INT_MAX),
    ConfigKey("num.recovery.threads.per.data.dir", int, 1, "Accepted for compatibility.", scope=BROKER, low=1,
              high=INT_MAX),
    ConfigKey("socket.send.buffer.bytes", int, 102400, "SO_SNDBUF of accepted sockets (-1: the OS default).",
              scope=BROKER, low=-1, high=INT_MAX),
    ConfigKey("socket.receive.buffer.bytes", int, 102400, "SO_RCVBUF of accepted sockets (-1: the OS default).",
              scope=BROKER, low=-1, high=INT_MAX),
    ConfigKey("process.roles", str, "broker,controller", "Accepted for compatibility (KRaft single node).",
              scope=BROKER),
    ConfigKey("controller.quorum.voters", str, "", "Accepted for compatibility.", scope=BROKER),
    ConfigKey("controller.listener.names", str, "", "Accepted for compatibility.", scope=BROKER),
    ConfigKey("listener.security.protocol.map", str, "", "Accepted for compatibility (PLAINTEXT only for now).",
              scope=BROKER),
    ConfigKey("inter.broker.listener.name", str, "", "Accepted for compatibility.", scope=BROKER),
    ConfigKey("zookeeper.connect", str, "", "Accepted for compatibility (no ZooKeeper).", scope=BROKER),
)

# Broker-level names of topic keys (server.properties), with a unit multiplier.
SYNONYMS: dict[str, tuple[str, int]] = {
    "log.segment.bytes": ("segment.bytes", 1),
    "log.roll.ms": ("segment.ms", 1),
    "log.roll.hours": ("segment.ms", 3600000),
    "log.roll.jitter.ms": ("segment.jitter.ms", 1),
    "log.roll.jitter.hours": ("segment.jitter.ms", 3600000),
    "log.index.size.max.bytes": ("segment.index.bytes", 1),
    "log.index.interval.bytes": ("index.interval.bytes", 1),
    "log.retention.ms": ("retention.ms", 1),
    "log.retention.minutes": ("retention.ms", 60000),
    "log.retention.hours": ("retention.ms", 3600000),
    "log.retention.bytes": ("retention.bytes", 1),
    "log.segment.delete.delay.ms": ("file.delete.delay.ms", 1),
    "log.flush.interval.messages": ("flush.messages", 1),
    "log.flush.interval.ms": ("flush.ms", 1),
    "message.max.bytes": ("max.message.bytes", 1),
    "log.message.timestamp.type": ("message.timestamp.type", 1),
    "log.message.timestamp.before.max.ms": ("message.timestamp.before.max.ms", 1),
    "log.message.timestamp.after.max.ms": ("message.timestamp.after.max.ms", 1),
    "log.cleanup.policy": ("cleanup.policy", 1),
    "log.cleaner.delete.retention.ms": ("delete.retention.ms", 1),
    "log.cleaner.min.compaction.lag.ms": ("min.compaction.lag.ms", 1),
    "log.cleaner.max.compaction.lag.ms": ("max.compaction.lag.ms", 1),
    "log.cleaner.min.cleanable.ratio": ("min.cleanable.dirty.ratio", 1),
}


def normalize_key(key: str) -> str:
    return key.replace("_", ".")


class Config(Mapping):
    """Validated, immutable key → value mapping; missing keys read as their Kafka default.

    ``Config(overrides, scope=None)``: ``scope="topic"`` refuses store-only keys (a topic's own config).
    Thread-safe (immutable).
    """

    __slots__ = ("_values", "_overrides")

    def __init__(self, overrides: Mapping[str, Any] | None = None, *, scope: str | None = None,
                 parent: Config | None = None):
        values = dict(parent._values) if parent is not None else {k.name: k.default for k in CONFIG_KEYS.values()}
        given: dict[str, Any] = {}
        for raw_key, raw in (overrides or {}).items():
            if not isinstance(raw_key, str):
                raise InvalidConfigError(f"config key {raw_key!r} is not a string")
            key = normalize_key(raw_key)
            mult = 1
            if key in SYNONYMS and scope != TOPIC:
                key, mult = SYNONYMS[key]
            spec = CONFIG_KEYS.get(key)
            if spec is None:
                raise InvalidConfigError(f"unknown config key {raw_key!r}")
            if scope == TOPIC and spec.scope != TOPIC:
                raise InvalidConfigError(f"config key {key!r} is a store setting, not a topic setting")
            try:
                value = spec.parse(raw)
            except InvalidConfigError as e:
                if key == normalize_key(raw_key):
                    raise
                # a broker name of a topic key: name the key as given (Kafka does), and what it sets
                raise InvalidConfigError(f"{raw_key}={raw!r} (sets {key}): {str(e).split(': ', 1)[-1]}") from None
            if mult != 1 and value != -1:
                value *= mult
            values[key] = value
            given[key] = value
        self._values = values
        self._overrides = given

    def __getitem__(self, key: str):
        return self._values[normalize_key(key)]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    @property
    def overrides(self) -> dict[str, Any]:
        """Only the keys that were given explicitly (what a topic persists)."""
        return dict(self._overrides)

    def with_overrides(self, overrides: Mapping[str, Any] | None, scope: str | None = TOPIC) -> Config:
        return Config(overrides, scope=scope, parent=self)

    def __repr__(self):
        return f"Config({self._overrides!r})"
