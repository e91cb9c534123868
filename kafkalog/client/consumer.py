"""KafkaConsumer: kafka-python's consumer, reading a LogStore in this process instead of a cluster.

Data path::

    poll() -> [group: notice a new generation -> revoke (commit) -> sync -> take the stable assignment]
           -> per assigned, unpaused partition (round robin from where the last poll stopped):
                  the rest of the partition's current chunk, then Log.read(position) -> whole batches, zero copy
                  (the next chunk) -> records from position on -> ConsumerRecord, built in C
           -> nothing yet: sleep on an Event that every append through this process's Log objects sets, checking
              Log.has_data_after() (one lseek) every WAKE_POLL_S for appends by other processes

Positions start at the group's committed offset, else at ``auto_offset_reset`` ('earliest', 'latest', 'none'
raises ``NoOffsetForPartitionError``). A position below the log start offset (a delete-before or retention ran
past it) or above the log end also follows ``auto_offset_reset``, as a Kafka consumer does on OFFSET_OUT_OF_RANGE.
A chunk (one read of up to max_partition_fetch_bytes) is this consumer's fetched data, as a Kafka consumer's
completed fetch: later polls go on from it with no look at the log, so records another process deleted after the
chunk was read may still come out of it (a Kafka consumer returns what it fetched, too); a delete-before through
this process's Log is seen at once, and the next chunk's read sees every process's.

Groups (``group_id`` with ``subscribe``): see ``group.py``; commits go to ``__consumer_offsets`` through the store's
OffsetStore and are fenced: a member that left, was evicted or lost the partition gets ``CommitFailedError``.

Parallel rebalance (``enable_parallel_rebalance=True``, seed 003): see ``parallel.py``.

Thread safety: like kafka-python's, a consumer is used by one thread; only ``wakeup()`` may be called from another.
A background heartbeat thread (groups only) touches the member's lock file and nothing else.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time

from .._engine.batch import RecordPool, iter_records, next_offset_after, take_consumer_records
from ..errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidConfigError,
    KafkaError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from ..storage import LogStore
from ..storage.isolation import drop_aborted, is_read_committed
from ..storage.log import EXCLUSIVE
from ..structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .group import GroupMember, assignor_name
from .parallel import ParallelRebalance

__all__ = ["ConsumerRebalanceListener", "KafkaConsumer"]

_log = logging.getLogger("kafkalog.consumer")

# A waiting poll looks for appends made by other processes (one lseek + one stat per partition) every WAKE_POLL_S,
# backing off to WAKE_POLL_MAX_S while nothing comes: ~1 ms latency after recent traffic, <= 5 ms when idle.
WAKE_POLL_S = 0.0005
WAKE_POLL_MAX_S = 0.005
GROUP_POLL_S = 0.05  # ... and for group changes when nothing else wakes it
DEFAULT_API_TIMEOUT_MS = 60000  # Java's default.api.timeout.ms: committed()/position() wait for a stable offset
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})

# kafka-python configs that name network or client internals: accepted (so an app's config moves over unchanged)
# and ignored, since there is no network
_IGNORED = frozenset({
    "bootstrap_servers", "client_rack", "enable_incremental_fetch_sessions", "fetch_max_wait_ms", "fetch_min_bytes",
    "request_timeout_ms", "retry_backoff_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms",
    "max_in_flight_requests_per_connection", "metadata_max_age_ms", "client_dns_lookup", "receive_buffer_bytes",
    "send_buffer_bytes", "receive_message_max_bytes", "socket_options", "security_protocol", "api_version",
    "api_version_auto_timeout_ms", "bootstrap_timeout_ms", "connections_max_idle_ms", "metric_reporters",
    "metrics_enabled", "metrics_num_samples", "metrics_sample_window_ms", "metric_group_prefix", "selector",
    "ssl_context", "ssl_check_hostname", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile", "ssl_password",
    "ssl_ciphers", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password", "sasl_kerberos_name",
    "sasl_kerberos_service_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider", "proxy_url",
    "socks5_proxy", "kafka_client", "group_instance_id", "allow_auto_create_topics", "check_crcs",
})


class ConsumerRebalanceListener:
    """kafka-python's listener: subclass and pass to ``subscribe(listener=...)``."""

    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        pass

    def on_partitions_lost(self, lost):
        """The partitions went to others before this consumer could revoke them (it was evicted): no commit can
        succeed any more. Default: on_partitions_revoked (kafka-python's)."""
        self.on_partitions_revoked(lost)


class _NoHeaders(list):
    """The headers of every consumed record that has none: one shared empty list that refuses changes (so no list
    is allocated per record, and records stay out of the cycle collector's way). ``list(record.headers)`` copies."""

    __slots__ = ()

    def _read_only(self, *args, **kwargs):
        raise TypeError("a consumed record without headers shares one read-only empty list: copy it first "
                        "(list(record.headers))")

    append = extend = insert = remove = pop = clear = sort = reverse = _read_only
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only

    def __reduce__(self):
        return list, ()


NO_HEADERS = _NoHeaders()


class _Part:
    __slots__ = ("tp", "log", "position", "paused", "highwater", "stream", "stream_next", "stream_stop", "pool")

    def __init__(self, tp: TopicPartition, log):
        self.tp = tp
        self.log = log
        self.position: int | None = None
        self.paused = False
        self.highwater: int | None = None
        # the rest of the last read (a fetched chunk, like a Kafka client's completed fetch): the next poll goes on
        # from it instead of decoding the records of a half-consumed batch again
        self.stream = None
        self.stream_next = -1
        self.stream_stop = -1
        # the records of the last two takes: those the app has dropped since are refilled for the next ones instead
        # of being freed and allocated again
        self.pool = RecordPool()


class KafkaConsumer:
    """Consume records from a kafkalog store with kafka-python's API.

    ``KafkaConsumer(*topics, store=STORE_OR_PATH, group_id=None, **configs)``; the configs are kafka-python's (see
    DEFAULT_CONFIG); network settings are accepted and ignored. Also ``enable_parallel_rebalance`` (seed 003).
    """

    DEFAULT_CONFIG = {
        "client_id": "kafkalog-consumer",
        "group_id": None,
        "key_deserializer": None,
        "value_deserializer": None,
        "fetch_max_bytes": 52428800,
        "max_partition_fetch_bytes": 1048576,
        "auto_offset_reset": "latest",
        "enable_auto_commit": True,
        "auto_commit_interval_ms": 5000,
        "default_offset_commit_callback": None,
        "isolation_level": "read_uncommitted",
        "partition_assignment_strategy": ("range", "roundrobin"),
        "max_poll_records": 500,
        "max_poll_interval_ms": 300000,
        "session_timeout_ms": 45000,
        "heartbeat_interval_ms": 3000,
        "consumer_timeout_ms": float("inf"),
        "exclude_internal_topics": True,
        "enable_parallel_rebalance": False,
    }

    def __init__(self, *topics, store=None, **configs):
        self.config = self._parse_config(configs)
        c = self.config
        if store is None:
            raise InvalidConfigError("KafkaConsumer needs store=: a LogStore or the path of a data directory")
        if isinstance(store, LogStore):
            self._store, self._owns_store = store, False
        else:
            # read-only is enough without a group; a group commits, so it needs a writer (shared mode)
            self._store = LogStore(store, read_only=c["group_id"] is None, maintenance=False)
            self._owns_store = True
        self._group = c["group_id"]
        self._auto_commit = bool(c["enable_auto_commit"]) and self._group is not None
        self._commit_interval = c["auto_commit_interval_ms"] / 1000.0
        self._next_auto_commit = time.monotonic() + self._commit_interval
        self._reset = c["auto_offset_reset"]
        self._max_records = c["max_poll_records"]
        self._part_bytes = c["max_partition_fetch_bytes"]
        self._fetch_bytes = c["fetch_max_bytes"]
        self._kdeser = c["key_deserializer"]
        self._read_committed = is_read_committed(c["isolation_level"])
        self._vdeser = c["value_deserializer"]
        self._strategies = [assignor_name(s) for s in c["partition_assignment_strategy"]]
        self._closed = False
        self._parts: dict[TopicPartition, _Part] = {}
        self._order: list[TopicPartition] = []
        self._next = 0
        self._subscription: set[str] | None = None
        self._pattern = None
        self._pattern_checked = 0.0
        self._listener = None
        self._user_assignment = False
        self._member: GroupMember | None = None
        self._pending_generation = -1
        self._event = threading.Event()
        self._last_poll = time.monotonic()
        self._hb_stop = threading.Event()
        self._hb_thread = None
        self._iterator = None
        self._consumer_timeout = c["consumer_timeout_ms"] / 1000.0
        self._parallel: ParallelRebalance | None = None
        if c["enable_parallel_rebalance"]:
            self._parallel = ParallelRebalance(self)
        self._metrics = {"records-consumed-total": 0, "polls-total": 0, "commits-total": 0, "rebalances-total": 0}
        if topics:
            try:
                self.subscribe(topics)
            except BaseException:
                self.close(autocommit=False)  # e.g. InconsistentGroupProtocolError: release what was opened
                raise

    @classmethod
    def _parse_config(cls, configs: dict) -> dict:
        c = dict(cls.DEFAULT_CONFIG)
        for k, v in configs.items():
            if k in c:
                c[k] = v
            elif k not in _IGNORED:
                raise InvalidConfigError(f"unknown KafkaConsumer config {k!r}")
        if c["auto_offset_reset"] not in ("earliest", "latest", "none"):
            # kafka-python also takes 'smallest'/'largest'
            alias = {"smallest": "earliest", "largest": "latest"}.get(c["auto_offset_reset"])
            if alias is None:
                raise InvalidConfigError(f"auto_offset_reset: {c['auto_offset_reset']!r} is not one of "
                                         "'earliest', 'latest', 'none'")
            c["auto_offset_reset"] = alias
        for key in ("max_poll_records", "max_partition_fetch_bytes", "fetch_max_bytes", "session_timeout_ms",
                    "heartbeat_interval_ms", "max_poll_interval_ms", "auto_commit_interval_ms"):
            if not isinstance(c[key], int) or c[key] <= 0:
                raise InvalidConfigError(f"{key}: {c[key]!r} must be a positive integer")
        if c["heartbeat_interval_ms"] >= c["session_timeout_ms"]:
            raise InvalidConfigError(f"heartbeat_interval_ms ({c['heartbeat_interval_ms']}) must be lower than "
                                     f"session_timeout_ms ({c['session_timeout_ms']})")
        if c["group_id"] is not None and (not isinstance(c["group_id"], str) or not c["group_id"]):
            raise InvalidConfigError(f"group_id: {c['group_id']!r} must be a non-empty string or None")
        if c["enable_parallel_rebalance"] and c["group_id"] is None:
            raise InvalidConfigError("enable_parallel_rebalance needs a group_id (the gaps are committed to the "
                                     "group's second commit log)")
        is_read_committed(c["isolation_level"])  # InvalidConfigError naming the two levels
        try:
            for s in c["partition_assignment_strategy"]:
                assignor_name(s)
        except ValueError as e:
            raise InvalidConfigError(str(e)) from None
        return c

    # ------------------------------------------------------------------------------------------------ guards

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _part(self, tp) -> _Part:
        tp = TopicPartition(*tp)
        p = self._parts.get(tp)
        if p is None:
            raise IllegalStateError(f"partition {tp} is not currently assigned to this consumer")
        return p

    @property
    def store(self) -> LogStore:
        return self._store

    # ------------------------------------------------------------------------------------------------ metadata

    def topics(self) -> set[str]:
        self._check_open()
        exclude = self.config["exclude_internal_topics"]
        return {t for t in self._store.topics() if not (exclude and t in INTERNAL_TOPICS)}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self._check_open()
        try:
            return set(range(self._store.partitions_for(topic)))
        except UnknownTopicOrPartitionError:
            return None

    def _partition_counts(self, topics) -> dict[str, int]:
        out = {}
        for t in topics:
            try:
                out[t] = self._store.partitions_for(t)
            except UnknownTopicOrPartitionError:
                pass
        return out

    def _log(self, tp: TopicPartition):
        try:
            n = self._store.partitions_for(tp.topic)
        except UnknownTopicOrPartitionError:
            raise UnknownTopicOrPartitionError(f"unknown topic {tp.topic!r} in {self._store.path}") from None
        if not 0 <= tp.partition < n:
            raise UnknownTopicOrPartitionError(f"topic {tp.topic!r} has no partition {tp.partition} "
                                               f"(it has {n})")
        return self._store.log(tp.topic, tp.partition)

    # ------------------------------------------------------------------------------------------------ assignment

    def subscribe(self, topics=(), pattern=None, listener=None) -> None:
        """Subscribe to topics (or a regex ``pattern``); with a group_id, join the group and share partitions."""
        self._check_open()
        if self._user_assignment:
            raise IllegalStateError("subscribe() after assign(): a consumer uses one or the other")
        if isinstance(topics, str):
            topics = [topics]
        if (not topics) == (pattern is None):
            raise IllegalStateError("subscribe() takes topics or a pattern, not both and not neither")
        if listener is not None and not (hasattr(listener, "on_partitions_revoked")
                                         and hasattr(listener, "on_partitions_assigned")):
            raise TypeError("listener must have on_partitions_revoked and on_partitions_assigned")
        self._listener = listener
        if pattern is not None:
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._subscription = self._match_pattern()
        else:
            self._pattern = None
            for t in topics:
                if not isinstance(t, str) or not t:
                    raise ValueError(f"topic names are non-empty strings, got {t!r}")
            self._subscription = set(topics)
        self._on_subscription_change()

    def _match_pattern(self) -> set[str]:
        self._pattern_checked = time.monotonic()
        return {t for t in self.topics() if self._pattern.match(t)}

    def _on_subscription_change(self) -> None:
        if self._group is None:
            self._set_assignment([TopicPartition(t, p) for t, n in sorted(self._partition_counts(
                self._subscription).items()) for p in range(n)])
            return
        if self._member is None:
            self._member = GroupMember(self._store, self._group, client_id=self.config["client_id"],
                                       strategies=self._strategies,
                                       session_timeout_ms=self.config["session_timeout_ms"],
                                       topic_partitions=self._partition_counts)
            self._member.join(sorted(self._subscription))
            self._start_heartbeat()
        else:
            self._member.join(sorted(self._subscription))

    def subscription(self) -> set[str] | None:
        return None if self._subscription is None else set(self._subscription)

    def unsubscribe(self) -> None:
        self._check_open()
        self._revoke_all()
        self._leave_group()
        self._subscription = None
        self._pattern = None
        self._user_assignment = False

    def assign(self, partitions) -> None:
        """Take these partitions (no group membership); commits still go to group_id when one is set."""
        self._check_open()
        if self._subscription is not None:
            raise IllegalStateError("assign() after subscribe(): a consumer uses one or the other")
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            self._log(tp)  # unknown topic or partition: fail here, naming it
        self._user_assignment = True
        self._set_assignment(tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def _set_assignment(self, tps) -> None:
        keep = {}
        for tp in tps:
            keep[tp] = self._parts.get(tp) or _Part(tp, self._log(tp))
        for tp, p in self._parts.items():
            if tp not in keep:
                p.log.remove_waiter(self._event)
                if self._parallel is not None:
                    self._parallel.release(tp)
        for p in keep.values():
            p.log.add_waiter(self._event)
        self._parts = keep
        self._order = sorted(keep)
        self._next = 0
        if self._parallel is not None:
            for tp in self._order:
                self._parallel.take(tp)

    # ------------------------------------------------------------------------------------------------ groups

    def _start_heartbeat(self) -> None:
        if self._hb_thread is not None:
            return
        self._hb_stop.clear()
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, name=f"{self.config['client_id']}-heartbeat",
                                           daemon=True)
        self._hb_thread.start()

    def _heartbeat_loop(self) -> None:
        interval = self.config["heartbeat_interval_ms"] / 1000.0
        max_poll = self.config["max_poll_interval_ms"] / 1000.0
        while not self._hb_stop.wait(interval):
            member = self._member
            if member is None:
                continue
            # like Kafka's heartbeat thread: a consumer that stopped calling poll() stops heartbeating and is
            # evicted by the others after session_timeout_ms
            if time.monotonic() - self._last_poll <= max_poll:
                member.heartbeat()

    def _leave_group(self) -> None:
        self._hb_stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join()
            self._hb_thread = None
        if self._member is not None:
            try:
                self._member.leave()
            finally:
                self._member = None

    def _revoke_all(self, rebalance: bool = False) -> None:
        # eager rebalance: the listener hears of every rebalance, with an empty set when nothing was assigned
        if not self._parts and not (rebalance and self._listener is not None):
            return
        revoked = set(self._parts)
        if self._auto_commit and revoked:
            try:
                self._commit_positions(sync=True)
            except KafkaError as e:
                _log.warning("commit before revoking %s failed: %s", sorted(revoked), e)
        if self._listener is not None and not self._user_assignment:
            self._listener.on_partitions_revoked(revoked)
        self._set_assignment([])

    def _coordinate(self) -> None:
        """Group work for this poll: notice generation changes, revoke, sync, take a stable assignment."""
        member = self._member
        if member is None:
            if self._pattern is not None and time.monotonic() - self._pattern_checked > 1.0:
                topics = self._match_pattern()
                if topics != self._subscription:
                    self._subscription = topics
                    self._on_subscription_change()
            return
        if self._pattern is not None and time.monotonic() - self._pattern_checked > 1.0:
            topics = self._match_pattern()
            if topics != self._subscription:
                self._subscription = topics
                member.join(sorted(topics))
        member.check()
        member.refresh()
        state = member.state
        if not member.is_member():
            # evicted (missed heartbeats or max_poll_interval_ms): Kafka's UNKNOWN_MEMBER_ID, join again
            _log.warning("member %s was evicted from group %s; rejoining", member.member_id, self._group)
            lost = set(self._parts)
            self._set_assignment([])
            if lost and self._listener is not None:
                getattr(self._listener, "on_partitions_lost", self._listener.on_partitions_revoked)(lost)
            member.join(sorted(self._subscription or ()))
            member.refresh()
            state = member.state
        gen = state["generation"]
        if gen != member.generation:
            if self._pending_generation != gen:
                self._revoke_all(rebalance=True)
                try:
                    member.sync(gen)
                except UnknownMemberIdError:
                    return
                self._pending_generation = gen
                member.refresh()
                state = member.state
            if state["generation"] != gen:
                return
        if not state["stable"] or state["generation"] != member.generation:
            return
        if self._pending_generation == member.generation:
            self._pending_generation = -1
            assigned = member.assignment()
            self._metrics["rebalances-total"] += 1
            self._set_assignment(assigned)
            if self._listener is not None:
                self._listener.on_partitions_assigned(set(assigned))

    def _owns_for_commit(self, tps) -> None:
        """Fencing (group lock held shared): a member commits only partitions it still owns."""
        member = self._member
        if member is None:
            if self._group is not None and not self._user_assignment:
                raise CommitFailedError(f"consumer is not a member of group {self._group}")
            return
        member.refresh()
        if not member.is_member():
            raise CommitFailedError(f"member {member.member_id} is no longer in group {self._group} (evicted after "
                                    "missing heartbeats or max_poll_interval_ms); its partitions went to others")
        owned = set(self._parts)
        for tp in tps:
            if tp not in owned:
                raise CommitFailedError(f"{tp} is not assigned to member {member.member_id} of group {self._group} "
                                        "(a rebalance gave it to another member)")

    # ------------------------------------------------------------------------------------------------ positions

    def _committed_offset(self, tp, timeout_ms=None) -> OffsetAndMetadata | None:
        """The group's committed offset. read_committed (Kafka's OffsetFetch with RequireStable): while a
        transaction that holds an offset commit for ``tp`` is open, wait for it to end, up to ``timeout_ms``
        (None: DEFAULT_API_TIMEOUT_MS; 0: do not wait), then raise UnstableOffsetCommitError."""
        if self._group is None:
            return None
        offsets = self._store.offsets
        if self._read_committed:
            wait = DEFAULT_API_TIMEOUT_MS if timeout_ms is None else timeout_ms
            deadline = time.monotonic() + wait / 1000.0
            pause = 0.001
            while tp in offsets.pending(self._group):
                if time.monotonic() >= deadline:
                    raise UnstableOffsetCommitError(
                        f"group {self._group!r} has an offset commit for {tp} in a transaction that is still open "
                        f"(read_committed waits for it to end: waited {wait} ms)")
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        return offsets.committed(self._group, tp)

    def _end_offset(self, log) -> int:
        """Where 'latest' is: the last stable offset for read_committed, else the high watermark (Kafka's
        ListOffsets by isolation level)."""
        return log.last_stable_offset if self._read_committed else log.high_watermark

    def _reset_position(self, p: _Part, why: str) -> int:
        log = p.log
        if self._reset == "earliest":
            p.position = log.log_start_offset
        elif self._reset == "latest":
            p.position = self._end_offset(log)
        else:
            raise NoOffsetForPartitionError(f"{p.tp}: {why} and auto_offset_reset='none'")
        return p.position

    def _resolve(self, p: _Part, timeout_ms=None) -> int:
        if p.position is None:
            c = self._committed_offset(p.tp, timeout_ms)
            if c is not None and c.offset >= 0:
                p.position = c.offset
            else:
                self._reset_position(p, "no committed offset")
        return p.position

    def seek(self, partition, offset: int) -> None:
        self._check_open()
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek offset must be an int >= 0, got {offset!r}")
        self._part(partition).position = offset

    def seek_to_beginning(self, *partitions) -> None:
        self._check_open()
        for tp in partitions or list(self._parts):
            p = self._part(tp)
            p.position = p.log.log_start_offset

    def seek_to_end(self, *partitions) -> None:
        self._check_open()
        for tp in partitions or list(self._parts):
            p = self._part(tp)
            p.position = self._end_offset(p.log)

    def position(self, partition, timeout_ms=None) -> int:
        """The next offset to read; resolved from the committed offset (read_committed: a stable one, waiting up
        to ``timeout_ms``) or ``auto_offset_reset`` when there is none yet."""
        self._check_open()
        return self._resolve(self._part(partition), timeout_ms)

    def highwater(self, partition) -> int | None:
        return self._part(partition).highwater

    def pause(self, *partitions) -> None:
        self._check_open()
        for tp in partitions:
            self._part(tp).paused = True
        if self._parallel is not None:
            self._parallel.pause(partitions, True)

    def resume(self, *partitions) -> None:
        self._check_open()
        for tp in partitions:
            self._part(tp).paused = False
        if self._parallel is not None:
            self._parallel.pause(partitions, False)

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, p in self._parts.items() if p.paused}

    def beginning_offsets(self, partitions, timeout_ms=None) -> dict[TopicPartition, int]:
        self._check_open()
        return {TopicPartition(*tp): self._log(TopicPartition(*tp)).log_start_offset for tp in partitions}

    def end_offsets(self, partitions, timeout_ms=None) -> dict[TopicPartition, int]:
        """The high watermark of each partition; with isolation_level='read_committed' its last stable offset."""
        self._check_open()
        return {TopicPartition(*tp): self._end_offset(self._log(TopicPartition(*tp))) for tp in partitions}

    def offsets_for_times(self, timestamps, timeout_ms=None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition the earliest offset whose timestamp is >= the given one (None when there is none),
        found with the engine's time index."""
        self._check_open()
        out = {}
        for tp, ts in timestamps.items():
            if not isinstance(ts, int) or ts < 0:
                raise ValueError(f"offsets_for_times: the timestamp for {tp} must be an int >= 0, got {ts!r}")
            tp = TopicPartition(*tp)
            found = self._log(tp).offset_for_time(ts)
            out[tp] = None if found is None else OffsetAndTimestamp(found.offset, found.timestamp, None)
        return out

    # ------------------------------------------------------------------------------------------------ fetching

    def poll(self, timeout_ms: int = 0, max_records: int | None = None, update_offsets: bool = True):
        """{TopicPartition: [ConsumerRecord]}: records after each position, at most max_records in all; waits up to
        timeout_ms for the first one (woken by appends, never spinning)."""
        self._check_open()
        if max_records is None:
            max_records = self._max_records
        elif not isinstance(max_records, int) or max_records <= 0:
            raise ValueError(f"max_records must be a positive int, got {max_records!r}")
        if timeout_ms is None or timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
        self._metrics["polls-total"] += 1
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            self._last_poll = time.monotonic()
            self._coordinate()
            if self._auto_commit and self._last_poll >= self._next_auto_commit:
                self._auto_commit_now()
            out = self._fetch(max_records, update_offsets)
            if out:
                return out
            now = time.monotonic()
            if now >= deadline or self._closed:
                return {}
            # appends from here on set the event; one that came after the fetch above, the fetch below finds (a
            # poll that finds records never touches the event)
            self._event.clear()
            out = self._fetch(max_records, update_offsets)
            if out:
                return out
            self._wait(deadline - now)

    def _wait(self, remaining: float) -> None:
        """Sleep until an append wakes us, another process appended, or it is time to look at the group again."""
        cross = self._store.mode != EXCLUSIVE
        limit = remaining if self._member is None else min(remaining, GROUP_POLL_S)
        if self._auto_commit:
            limit = min(limit, max(0.0, self._next_auto_commit - time.monotonic()))
        end = time.monotonic() + limit
        parts = [p for p in self._parts.values() if not p.paused]
        step = WAKE_POLL_S
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            if not cross:
                self._event.wait(left)
                return
            if self._event.wait(min(left, step)):
                return
            step = min(step * 1.5, WAKE_POLL_MAX_S)
            for p in parts:
                pos = p.position
                if pos is None or (p.log.has_data_after(pos)
                                   and (not self._read_committed or p.log.last_stable_offset > pos)):
                    return
            if self._parallel is not None and self._parallel.has_work():
                return

    def _fetch(self, max_records: int, update_offsets: bool) -> dict:
        out: dict[TopicPartition, list] = {}
        left = max_records
        budget = self._fetch_bytes
        order = self._order
        n = len(order)
        if self._parallel is not None and self._parallel.active:
            # the gaps get half the budget when both have records (seed 003: poll returns records from both)
            got = self._parallel.fetch(out, max(1, left // 2) if n else left)
            left -= got
        for i in range(n):
            if left <= 0 or budget <= 0:
                break
            tp = order[(self._next + i) % n]
            p = self._parts[tp]
            if p.paused:
                continue
            pos = p.position
            if pos is None:
                try:
                    pos = self._resolve(p, 0 if self._read_committed else None)
                except UnstableOffsetCommitError:
                    continue  # Java's consumer: fetch it again on a later poll, once the transaction ended
            log = p.log
            if not log.has_data_after(pos) and pos >= log.log_start_offset:
                continue
            recs, nxt, used = self._read(p, pos, left, min(self._part_bytes, budget))
            if recs:
                have = out.get(tp)
                if have is None:
                    out[tp] = recs  # _read's own list: no copy
                else:
                    have.extend(recs)
                left -= len(recs)
                budget -= used
            if update_offsets and (recs or nxt > pos):
                # also past batches without a record for us (a Kafka log dir's transaction markers): else a poll
                # would read them again forever
                p.position = nxt
        if n:
            self._next = (self._next + 1) % n
        self._metrics["records-consumed-total"] += max_records - left
        return out

    def _read(self, p: _Part, pos: int, limit: int, max_bytes: int, end: int | None = None):
        """Up to limit records from pos (below end when given): (records, next position, bytes read). A poll that
        uses up a chunk (one read of up to max_bytes) goes on into the next one, as Kafka's consumer drains several
        completed fetches into one poll."""
        stop = end if end is not None else 0x7FFFFFFFFFFFFFFF
        recs: list = []
        if (p.stream is not None and p.stream_next == pos and p.stream_stop == stop
                and pos >= p.log.last_known_log_start_offset):  # no I/O: see the module's docstring
            last = take_consumer_records(p.stream, recs, limit, ConsumerRecord, p.tp.topic, p.tp.partition, -1,
                                         NO_HEADERS, p.pool)
            if last >= 0:
                pos = last
                if len(recs) == limit:
                    p.stream_next = last
                    return self._deserialized(recs), last, 0
        p.stream = None
        used = 0
        while pos < stop:
            more, pos, n = self._read_chunk(p, pos, limit - len(recs), max_bytes, stop, end, bool(recs))
            used += n
            if not more:
                break
            recs += more
            if len(recs) >= limit or p.stream is not None:
                break
        return self._deserialized(recs), pos, used

    def _deserialized(self, recs: list) -> list:
        if self._kdeser is not None or self._vdeser is not None:
            return [self._deserialize(r) for r in recs]
        return recs

    def _read_chunk(self, p: _Part, pos: int, limit: int, max_bytes: int, stop: int, end, more: bool):
        """Read one chunk of whole batches at pos and take up to limit records of it (the rest stays in p.stream
        for the next poll). ``more``: records of this poll came before it, so an out-of-range pos (the log moved
        meanwhile) ends this poll instead of resetting the position."""
        log = p.log
        committed = self._read_committed
        while True:
            try:
                if committed:
                    # below the last stable offset; aborted transactions' batches dropped (storage/isolation.py)
                    _, hwm, _, view, aborted = log.fetch_isolated(pos, max_bytes, True)
                    if view is None:
                        view = memoryview(b"")
                    raw_next = next_offset_after(view, pos)
                    view = drop_aborted(view, aborted)
                else:
                    view = log.read(pos, max_bytes)
                break
            except OffsetOutOfRangeError:
                if more:
                    return [], pos, 0
                lso, leo = log.log_start_offset, log.log_end_offset
                if lso <= pos <= leo:
                    continue  # the log moved between the check and the read: look again
                why = (f"position {pos} is below the log start offset {lso}" if pos < lso
                       else f"position {pos} is past the log end offset {leo}")
                _log.info("%s: %s; auto_offset_reset=%s", p.tp, why, self._reset)
                if end is not None:
                    return [], max(pos, lso), 0  # a gap's records below the start offset are gone: skip them
                pos = self._reset_position(p, why)
        p.highwater = hwm if committed else log.log_end_offset
        if not len(view):
            # read_committed: the batches read may all have been dropped (aborted): go on after them
            return [], (max(pos, min(stop, raw_next)) if committed else pos), 0
        topic, partition = p.tp
        recs: list = []
        # ConsumerRecord tuples are built in C straight from the records' bytes; deserializers run afterwards on
        # the built records
        stream = iter_records(view, 0, None, pos, stop)
        last = take_consumer_records(stream, recs, limit, ConsumerRecord, topic, partition, -1, NO_HEADERS, p.pool)
        nxt = pos if last < 0 else last
        if len(recs) == limit:
            p.stream, p.stream_next, p.stream_stop = stream, last, stop
        else:
            # whole batches were consumed: continue after the last one (skips offsets of compacted/empty batches)
            nxt = max(nxt, min(stop, raw_next if committed else next_offset_after(view, nxt)))
        return recs, nxt, len(view)

    def _deserialize(self, r: ConsumerRecord) -> ConsumerRecord:
        kd, vd = self._kdeser, self._vdeser
        return r._replace(key=kd(r.key) if kd is not None and r.key is not None else r.key,
                          value=vd(r.value) if vd is not None and r.value is not None else r.value)

    def __iter__(self):
        return self

    def __next__(self):
        """One record at a time (kafka-python's iterator); StopIteration after consumer_timeout_ms without one."""
        self._check_open()
        while True:
            if self._iterator:
                return self._iterator.pop()
            deadline = None if self._consumer_timeout == float("inf") else time.monotonic() + self._consumer_timeout
            while True:
                wait = 1000 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
                batch = self.poll(timeout_ms=wait)
                if batch:
                    recs = [r for rs in batch.values() for r in rs]
                    recs.reverse()
                    self._iterator = recs
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise StopIteration
                if self._closed:
                    raise StopIteration

    def wakeup(self) -> None:
        """Make a blocked poll() look again at once (from any thread)."""
        self._event.set()

    # ------------------------------------------------------------------------------------------------ commits

    def _require_group(self, what: str) -> None:
        if self._group is None:
            raise IllegalStateError(f"{what} needs a group_id")

    def _positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(p.position, "", None) for tp, p in self._parts.items()
                if p.position is not None}

    def _commit_positions(self, sync: bool) -> None:
        offsets = self._positions()
        if self._parallel is not None:
            self._parallel.commit_positions(sync)
        if offsets:
            self._commit(offsets, sync, split=False)

    def _commit(self, offsets: dict, sync: bool, split: bool = True) -> None:
        if self._parallel is not None and split:
            # an app's explicit offsets: those inside a gap are the child's (positions are always the primary's)
            offsets = self._parallel.split_commit(offsets, sync)
            if not offsets:
                return
        member = self._member
        if member is None:
            self._owns_for_commit(offsets)
            self._store.offsets.commit(self._group, offsets, sync=sync)
        else:
            with member._locked(shared=True):
                self._owns_for_commit(offsets)
                self._store.offsets.commit(self._group, offsets, sync=sync)
        self._metrics["commits-total"] += 1

    def _check_offsets(self, offsets) -> dict:
        out = {}
        for tp, om in offsets.items():
            tp = TopicPartition(*tp)
            if isinstance(om, int):
                om = OffsetAndMetadata(om, "", None)
            elif not isinstance(om, OffsetAndMetadata):
                om = OffsetAndMetadata(*om)
            if not isinstance(om.offset, int) or om.offset < 0:
                raise ValueError(f"commit offset for {tp} must be an int >= 0, got {om.offset!r}")
            out[tp] = om
        return out

    def commit(self, offsets=None, timeout_ms=None) -> None:
        """Commit offsets (default: the position of every assigned partition) and wait until they are durable."""
        self._check_open()
        self._require_group("commit()")
        if offsets is None:
            self._commit_positions(sync=True)
        else:
            self._commit(self._check_offsets(offsets), sync=True)

    def commit_async(self, offsets=None, callback=None):
        """Commit without waiting for the fsync (page cache: survives a process crash, not a power loss); returns
        a resolved Future; ``callback(offsets, response_or_exception)`` runs before it returns."""
        self._check_open()
        self._require_group("commit_async()")
        fut: concurrent.futures.Future = concurrent.futures.Future()
        offsets = self._positions() if offsets is None else self._check_offsets(offsets)
        try:
            if offsets:
                self._commit(dict(offsets), sync=False)
            fut.set_result(None)
        except KafkaError as e:
            fut.set_exception(e)
        cb = callback or self.config["default_offset_commit_callback"]
        if cb is not None:
            cb(offsets, fut.exception() or None)
        return fut

    def _auto_commit_now(self) -> None:
        self._next_auto_commit = time.monotonic() + self._commit_interval
        try:
            self._commit_positions(sync=False)
        except CommitFailedError as e:
            _log.warning("auto commit failed: %s", e)

    def committed(self, partition, metadata: bool = False, timeout_ms=None):
        """The group's committed offset for the partition (None when there is none); with metadata=True the
        OffsetAndMetadata. With parallel rebalance, the gap consumer's offset while its ranges are unfinished."""
        self._check_open()
        self._require_group("committed()")
        tp = TopicPartition(*partition)
        if self._parallel is not None:
            om = self._parallel.committed(tp)
            if om is not None:
                return om if metadata else om.offset
        om = self._committed_offset(tp, timeout_ms)
        if om is None:
            return None
        return om if metadata else om.offset

    # ------------------------------------------------------------------------------------------------ parallel

    def child_consumer_is_alive(self) -> bool:
        """Seed 003's childConsumerIsAlive(): True once the second (gap) consumer was created, until close()."""
        return self._parallel is not None and self._parallel.alive and not self._closed

    # ------------------------------------------------------------------------------------------------ lifecycle

    def close(self, autocommit: bool = True, timeout_ms=None) -> None:
        """Commit (with enable_auto_commit and autocommit), leave the group so the others rebalance at once,
        release the store when this consumer opened it."""
        if self._closed:
            return
        try:
            if self._group is not None and self._auto_commit and autocommit and self._parts:
                try:
                    self._commit_positions(sync=True)
                except KafkaError as e:
                    _log.warning("commit on close failed: %s", e)
            if self._listener is not None and self._member is not None and self._parts:
                # like kafka-python's close (Java's onLeavePrepare): the app can still commit in the callback
                self._member.refresh()
                owned = set(self._parts)
                if self._member.is_member():
                    self._listener.on_partitions_revoked(owned)
                else:
                    getattr(self._listener, "on_partitions_lost", self._listener.on_partitions_revoked)(owned)
            if self._parallel is not None:
                self._parallel.close()
            for p in self._parts.values():
                p.log.remove_waiter(self._event)
            self._parts = {}
            self._order = []
            self._leave_group()
        finally:
            self._closed = True
            self._event.set()
            if self._owns_store:
                self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def metrics(self, raw: bool = False) -> dict:
        m = dict(self._metrics)
        return m if raw else {"consumer-metrics": m}

    def bootstrap_connected(self) -> bool:
        return not self._closed

    def __repr__(self):
        return (f"KafkaConsumer(store={str(self._store.path)!r}, group_id={self._group!r}, "
                f"assignment={sorted(self._parts)})")
