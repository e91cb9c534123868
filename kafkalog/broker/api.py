"""The broker's APIs: what each Kafka request does to the one data dir, and the versions advertised.

Each handler is ``handler(services, ctx, header, frame, offset)`` and returns the response chunks, ``None`` (no
response: acks=0), or a coroutine whose result is the chunks (a Fetch long poll, a group barrier). Errors that Kafka
answers per partition are answered per partition; a request that cannot be parsed raises InvalidRequestError and
the connection is closed (Kafka's answer too).

The advertised matrix (``ADVERTISED``) is the one every real client accepts (see the protocol reference): Produce
advertises 0-11 but v0-2 close the connection (KAFKA-18659: librdkafka 2.0 probes Produce v0 to enable compression).
No tagged field is ever written: those Kafka defines for these answers are set only by what one node never does (a
leader change, a follower), and Kafka writes a tagged field only when it is set.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import re
import struct
import threading
import time
import uuid

from .._engine.batch import RecordBatch, iter_batches
from ..errors import (
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    FencedLeaderEpochError,
    GroupIdNotFoundError,
    InconsistentTopicIdError,
    InvalidGroupIdError,
    InvalidPartitionsError,
    InvalidProducerIdMappingError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    LogClosedError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    TransactionalIdNotFoundError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
    UnsupportedVersionError,
)
from ..storage.store import validate_topic_name
from ..structs import OffsetAndMetadata, TopicPartition
from . import _wire, security
from . import admin as _admin
from .consumer_groups import write_error_code
from .features import INVALID_UPDATE_VERSION, Features
from .features import SUPPORTED as SUPPORTED_FEATURES
from .group_configs import GroupConfigs
from .groups import GroupCoordinator
from .handling import (
    CLUSTER_ID,
    Slice,
    allowed,
    answer_sliced,
    check_partition_budget,
    error_code,
    not_allowed,
    request_body,
    respond,
)
from .producers import ProducerStates
from .quotas import FETCH as FETCH_QUOTA
from .quotas import PRODUCE as PRODUCE_QUOTA
from .quotas import ClientQuotas
from .sessions import TOPIC_IDS_FROM, FetchSessionCache, PartitionResult
from .share_groups import HANDLERS as _SHARE_HANDLERS
from .share_groups import VERSIONS as _SHARE_VERSIONS
from .share_groups import ShareCoordinator

log = logging.getLogger("kafkalog.broker")

ADVERTISED: dict[int, tuple[int, int]] = {
    0: (0, 13),   # Produce (3-13 accepted; 8: record errors, 9: flexible; 12: transactions v2's implicit add;
                  # 13: topic ids)
    1: (4, 18),   # Fetch (12: flexible, 13: topic ids, 15: replica state, 16: KIP-951 fields, 17: directory id,
                  #  18: a follower's high watermark, KIP-1166: a tagged field consumers leave out)
    2: (1, 11),   # ListOffsets (7: max timestamp, KIP-734; 8-11: tiered-storage timestamps, answered untiered)
    3: (0, 13),   # Metadata (10+: topic ids; 13: top-level error)
    8: (2, 10),   # OffsetCommit (7: group instance id, KIP-345; 8+ flexible; 10: topic ids)
    9: (1, 10),   # OffsetFetch (7: RequireStable, KIP-447; 8: batched groups; 10: topic ids)
    10: (0, 6),   # FindCoordinator (4+: batched keys, KIP-699; 6: share-partition keys, KIP-932)
    11: (0, 9),   # JoinGroup (4: KIP-394, 5: KIP-345 static members, 7: protocol type, 9: SkipAssignment)
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup (3+: batched, by member or instance id)
    14: (0, 5),   # SyncGroup (5: protocol type and name checked)
    17: (0, 1),   # SaslHandshake
    18: (0, 5),   # ApiVersions
    19: (2, 7),   # CreateTopics (5+: what was made; 7: topic id)
    20: (1, 6),   # DeleteTopics (6: by topic id)
    21: (0, 2),   # DeleteRecords (2: flexible)
    57: (0, 2),   # UpdateFeatures (kafka-features: transaction.version, group.version)
    22: (0, 5),   # InitProducerId (transactional ids; 3+: KIP-360 epoch bump)
    23: (2, 4),   # OffsetForLeaderEpoch (one leader epoch, 0, per partition)
    24: (0, 5),   # AddPartitionsToTxn (0-3: the client forms; 4+: broker to coordinator, batched, VerifyOnly)
    25: (0, 4),   # AddOffsetsToTxn
    26: (0, 5),   # EndTxn (5: transactions v2, KIP-890 part 2: an epoch bump per transaction)
    27: (1, 2),   # WriteTxnMarkers (the admin client's abortTransaction: kafka-transactions abort)
    28: (0, 6),   # TxnOffsetCommit (5: transactions v2's implicit AddOffsetsToTxn; 6: topic ids, KIP-1319)
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 2),   # ListTransactions
    68: (0, 1),   # ConsumerGroupHeartbeat (KIP-848; 1: SubscribedTopicRegex, member ids named by the client)
    69: (0, 1),   # ConsumerGroupDescribe (1: MemberType)
    36: (0, 2),   # SaslAuthenticate (2: flexible)
    48: (0, 1),   # DescribeClientQuotas (1: flexible)
    49: (0, 1),   # AlterClientQuotas (1: flexible)
}

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
AUTO_CREATE_PER_REQUEST = 32  # topics one Metadata request may auto-create
LEADER_NOT_AVAILABLE = 5
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = 29, 30, 31
class RequestContext:
    """Per-connection request context: who is asking, and what the answer should carry. Issue-5 hooks: quotas
    set ``throttle_time_ms``, authentication sets ``principal``."""

    __slots__ = ("connection", "client_id", "principal", "throttle_time_ms", "body", "client_software")

    def __init__(self, connection):
        self.connection = connection
        self.client_software = ""  # ApiVersions v3+'s client_software_name (KIP-511)
        self.body = None  # the request body when it was decoded off the loop
        self.client_id: str | None = None
        self.principal = "User:ANONYMOUS"
        self.throttle_time_ms = 0

    @property
    def peer(self) -> str:
        return self.connection.peer


class _LoopWaker:
    """Given to Log.add_waiter: an append (on the loop thread or any other thread of this process) wakes the
    fetches waiting on the partition."""

    __slots__ = ("services", "tp")

    def __init__(self, services, tp):
        self.services = services
        self.tp = tp

    def set(self):
        s = self.services
        if threading.get_ident() == s.loop_thread:
            s.wake(self.tp)
        else:
            try:
                s.loop.call_soon_threadsafe(s.wake, self.tp)
            except RuntimeError:  # loop closed
                pass


class _GroupCommit:
    """acks=all for one partition: one fsync at a time, off the loop (``Log.sync`` holds no lock while the disk
    works, so appends go on); every request that arrives while an fsync runs shares the next one, across
    connections: n concurrent producers cost about one fsync per round, not n."""

    __slots__ = ("services", "tp", "running", "waiting")

    def __init__(self, services, tp):
        self.services = services
        self.tp = tp
        self.running = False
        self.waiting: list = []

    def wait(self):
        fut = self.services.loop.create_future()
        self.waiting.append(fut)
        if not self.running:
            self._start()
        return fut

    def _start(self) -> None:
        batch, self.waiting = self.waiting, []
        self.running = True
        try:
            lg = self.services.log(self.tp.topic, self.tp.partition)
            job = self.services.loop.run_in_executor(None, lg.sync)
        except BaseException as e:  # noqa: BLE001  (answered on each waiting request)
            self._finish(batch, e)
            return
        job.add_done_callback(lambda f: self._finish(batch, None if f.cancelled() else f.exception()))

    def _finish(self, batch, exc) -> None:
        self.running = False
        for fut in batch:
            if not fut.done():
                if exc is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(exc)
        if self.waiting:
            self._start()


class _TxnSteps:
    """The transaction coordinator's calls of the broker's clients that can share a step (EndTxn:
    ``TransactionCoordinator.end_many``, one fsync of their decisions and one per partition for their markers;
    AddPartitionsToTxn / AddOffsetsToTxn: ``add_many``, one append and one fsync of their records): the requests
    that arrive while steps run are taken together by the next one, on one worker thread; the waiting requests hold
    no thread. Up to ``steps`` run at once (the next EndTxns' decisions are fsynced while the markers of the ones
    before are)."""

    __slots__ = ("services", "fn", "steps", "running", "waiting")

    def __init__(self, services, fn, steps: int = 2):
        self.services = services
        self.fn = fn  # list of calls -> list of results (an exception instance: that call's error)
        self.steps = steps
        self.running = 0
        self.waiting: list = []  # (call, future)

    def call(self, *args):
        fut = self.services.loop.create_future()
        self.waiting.append((args, fut))
        if self.running < self.steps:
            self._start()
        return fut

    def _start(self) -> None:
        batch, self.waiting = self.waiting, []
        self.running += 1
        try:
            job = self.services.loop.run_in_executor(None, self.fn, [a for a, _ in batch])
        except BaseException as e:  # noqa: BLE001  (answered on each waiting request)
            self._finish(batch, None, e)
            return
        job.add_done_callback(lambda f: self._finish(batch, None if f.cancelled() or f.exception() else f.result(),
                                                     None if f.cancelled() else f.exception()))

    def _finish(self, batch, results, exc) -> None:
        self.running -= 1
        for i, (_, fut) in enumerate(batch):
            if fut.done():
                continue
            if exc is not None or results is None:
                fut.set_exception(exc if exc is not None else KafkaStorageError("the coordinator's step was cancelled"))
            elif isinstance(results[i], BaseException):
                fut.set_exception(results[i])
            else:
                fut.set_result(results[i])
        if self.waiting and self.running < self.steps:
            self._start()


class Services:
    """Everything the handlers share: the store, groups, producer state, fetch waiters. Loop thread only."""

    def __init__(self, broker, store, config):
        self.broker = broker
        self.store = store
        self.config = config
        self.node_id = config["broker.id"] if config["broker.id"] >= 0 else config["node.id"]
        self.auto_create = config["auto.create.topics.enable"]
        self.max_request_bytes = config["socket.request.max.bytes"]
        self.host = "127.0.0.1"
        self.port = 0
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.waiters: dict[TopicPartition, set] = {}
        # appends by other processes (embedded producers beside the broker) wake no future: looked for this often
        self.other_writers_poll_s = 0.1
        self.wakers: dict[TopicPartition, _LoopWaker] = {}
        self.logs: dict[TopicPartition, object] = {}
        self.commits: dict[TopicPartition, _GroupCommit] = {}
        self.group_configs = GroupConfigs(config, store.path / ".kafkalog-broker" / "group-configs.json")
        self.groups = GroupCoordinator(self)
        self.shares = ShareCoordinator(self)
        self.producers = ProducerStates(store)
        self.quotas = ClientQuotas(config, store.path / ".kafkalog-broker" / "quotas.json")
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        users_path, acls_path = security.default_paths(store.path)
        self.mechanisms = [m.strip() for m in config["sasl.enabled.mechanisms"].split(",") if m.strip()]
        self.credentials = security.CredentialStore(users_path) if broker.sasl else None
        self.authorizer = None
        if config["authorizer.class.name"]:
            self.authorizer = security.Authorizer(acls_path, super_users=config["super.users"],
                                                  allow_everyone_if_no_acl_found=config[
                                                      "allow.everyone.if.no.acl.found"])
        self.txn = store.transactions
        self.txn_ends = _TxnSteps(self, self.txn.end_many)
        self.txn_adds = _TxnSteps(self, self.txn.add_many)
        self.txn.max_timeout_ms = config["transaction.max.timeout.ms"]
        self.features = Features(config, store.path / ".kafkalog-broker" / "features.json")
        self.txn.transaction_version = self.features.levels["transaction.version"]
        self._txn_expiry_s = config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000.0
        self._txn_expiry_due = time.monotonic() + self._txn_expiry_s
        self._sweeper = None
        self.faults = broker.faults_if_on  # a test's fault injection (broker/faults.py); None: off

    def advertise(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def start(self) -> None:
        self._sweeper = self.loop.create_task(self._sweep())

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.groups.close()
        self.shares.close()
        self.fetch_sessions.close_all()
        for tp, w in self.wakers.items():
            lg = self.logs.get(tp)
            if lg is not None:
                lg.remove_waiter(w)
        self.wakers.clear()
        self.logs.clear()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                self.groups.sweep()
                self.shares.sweep()
            except Exception as e:
                log.error("group sweep failed: %r", e)
            if self.shares.partitions:
                try:
                    await self.loop.run_in_executor(None, self.shares.expire_locks)
                except Exception as e:
                    log.error("share groups: expiring acquisition locks failed: %r", e)
            if time.monotonic() >= self._txn_expiry_due:
                self._txn_expiry_due = time.monotonic() + self._txn_expiry_s
                try:
                    await self.loop.run_in_executor(None, self.txn.expire)
                except Exception as e:
                    log.error("aborting timed-out transactions failed: %r", e)
            idle = self.config["connections.max.idle.ms"] / 1000.0
            receive = self.config["request.receive.timeout.ms"] / 1000.0
            now = time.monotonic()
            for c in list(self.broker.connections):
                if not c.busy and now - c.last_active > idle:
                    c.close(f"idle for more than connections.max.idle.ms={self.config['connections.max.idle.ms']}")
                elif c.partial_since and now - c.partial_since > receive:
                    c.close(f"a request frame did not arrive whole within request.receive.timeout.ms="
                            f"{self.config['request.receive.timeout.ms']}")

    def connection_closed(self, conn) -> None:
        if self.shares.sessions:
            self.shares.connection_closed(conn)

    def sasl_raw_token(self, conn, frame):
        return sasl_raw_token(self, conn, frame)

    # -- logs and waiters -----------------------------------------------------------------------------------------

    def log(self, topic: str, partition: int):
        tp = TopicPartition(topic, partition)
        lg = self.logs.get(tp)
        if lg is not None and not lg.closed:
            return lg
        lg = self.store.log(topic, partition)
        self.logs[tp] = lg
        w = _LoopWaker(self, tp)
        self.wakers[tp] = w
        lg.add_waiter(w)
        return lg

    def group_commit(self, topic: str, partition: int):
        """A future done when everything appended to the partition so far is fsynced (see ``_GroupCommit``)."""
        tp = TopicPartition(topic, partition)
        gc = self.commits.get(tp)
        if gc is None:
            gc = self.commits[tp] = _GroupCommit(self, tp)
        return gc.wait()

    def forget_topic(self, topic: str) -> None:
        for tp in [tp for tp in self.logs if tp.topic == topic]:
            self.logs.pop(tp, None)
            self.wakers.pop(tp, None)
            self.commits.pop(tp, None)
            self.wake(tp)

    def wake(self, tp) -> None:
        futs = self.waiters.get(tp)
        if futs:
            for f in futs:
                if not f.done():
                    f.set_result(None)

    def partitions(self, topic: str) -> int:
        """Partition count of an existing topic, else 0."""
        try:
            return self.store.partitions_for(topic)
        except KafkaError:
            return 0


# ---------------------------------------------------------------------------------------------------- helpers

# ---------------------------------------------------------------------------------------------------- time slices
# A request naming thousands of partitions must not hold the loop for seconds: handlers that loop over a
# request's items are generators that ``yield`` when their slice of loop time is used up (``yield`` an awaitable
# to wait for it off the loop). ``run_sliced`` answers at once when the handler never yielded.

def run_sliced(gen):
    """Run a generator handler: its result when it finished without yielding, else a coroutine that finishes it,
    giving the loop a turn at each bare ``yield`` and awaiting each awaitable it yields."""
    try:
        step = next(gen)
    except StopIteration as e:
        return e.value
    if isinstance(step, asyncio.Future):
        # made before the coroutine runs: when its connection closes first, the coroutine never awaits it, and a
        # worker's error would be logged as "Future exception was never retrieved" (the awaiting code still gets it)
        step.add_done_callback(_retrieve)
    return _drive(gen, step)


def _retrieve(fut) -> None:
    if not fut.cancelled():
        fut.exception()


async def finish(gen):
    """A generator handler's (or helper's) result, from a coroutine."""
    out = run_sliced(gen)
    if asyncio.iscoroutine(out):
        out = await out
    return out


async def _drive(gen, step):
    while True:
        value = exc = None
        if step is None:
            await asyncio.sleep(0)
        else:
            try:
                value = await step
            except asyncio.CancelledError:
                gen.close()
                raise
            except Exception as e:  # noqa: BLE001  (thrown into the handler: it answers per partition)
                exc = e
        try:
            step = gen.throw(exc) if exc is not None else gen.send(value)
        except StopIteration as e:
            result = e.value
            if isinstance(result, Pipelined):
                result = result.coro
            if asyncio.iscoroutine(result):
                result = await result
            return result


# ---------------------------------------------------------------------------------------------------- ApiVersions

def api_versions(s: Services, ctx, header, frame, offset):
    # the body (client software name/version in v3+) is parsed to reject garbage all the same
    body = request_body(ctx, header, frame, offset)
    ctx.client_software = body.get("client_software_name") or ctx.client_software
    if header.api_version >= 5:
        # KIP-1242: a client names the cluster and node it means to reach, both or neither (else INVALID_REQUEST);
        # another cluster's id or another node's is REBOOTSTRAP_REQUIRED (129): its metadata is stale. Either error
        # is answered with nothing else, as Kafka 4.4 answers it
        cluster, node = body.get("cluster_id"), body.get("node_id", -1)
        code = 42 if (cluster is None) != (node == -1) else \
            129 if cluster is not None and (cluster != CLUSTER_ID or node != s.node_id) else 0
        if code:
            return respond(header, {"error_code": code, "throttle_time_ms": ctx.throttle_time_ms, "api_keys": []})
    answer = {"error_code": 0, "throttle_time_ms": ctx.throttle_time_ms,
              "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                           for k, (lo, hi) in sorted(ADVERTISED.items())]}
    if header.api_version >= 3:
        # Kafka leaves a feature whose supported minimum is 0 out of a v3 answer (older clients refused a minimum
        # of 0, KAFKA-17011); v4 lists them all
        answer["supported_features"] = [
            {"name": name, "min_version": lo, "max_version": hi} for name, (lo, hi) in SUPPORTED_FEATURES.items()
            if lo > 0 or header.api_version >= 4]
        # the epoch of the finalized levels: clients take in a feature set whose epoch is above the one they hold;
        # the server's start (ms) grows with every restart, which is when the levels can change
        answer["finalized_features_epoch"] = s.features.epoch
        answer["finalized_features"] = [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in s.features.finalized().items()]
    return respond(header, answer)


def update_features(s: Services, ctx, header, frame, offset):
    """UpdateFeatures (``kafka-features upgrade / downgrade``): every update checked first, as Kafka's controller
    checks them (one refused: INVALID_UPDATE_VERSION with Kafka's text, none applied); a downgrade needs UpgradeType
    safe or unsafe (v1+). The new levels are durable before the answer (features.py) and take effect at once:
    transaction.version is the level the transaction coordinator serves, group.version 0 refuses
    ConsumerGroupHeartbeat. ALTER on the cluster."""
    req = request_body(ctx, header, frame, offset)
    updates = req["feature_updates"]
    body = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None, "results": []}
    if not_allowed(s, ctx, "ALTER", "CLUSTER", security.CLUSTER_NAME):
        body.update(error_code=31, error_message="Cluster authorization failed.")
        return respond(header, body)
    why = s.features.refusal(updates, s.node_id, header.api_version)
    if why is not None:
        body.update(error_code=INVALID_UPDATE_VERSION, error_message=why)
        return respond(header, body)
    changed = {u["feature"]: u["max_version_level"] for u in updates
               if s.features.levels[u["feature"]] != u["max_version_level"]}
    if changed and not req.get("validate_only"):
        try:
            yield s.loop.run_in_executor(None, s.features.update, changed)  # written and fsynced: off the loop
        except (KafkaError, OSError) as e:
            body.update(error_code=error_code(e) if isinstance(e, KafkaError) else KafkaStorageError.code,
                        error_message=str(e))
            return respond(header, body)
        s.txn.transaction_version = s.features.levels["transaction.version"]
        log.info("feature levels %s set by %s", changed, ctx.peer)
    body["results"] = [{"feature": u["feature"], "error_code": 0, "error_message": "NONE"} for u in updates]
    return respond(header, body)


# ---------------------------------------------------------------------------------------------------- Metadata

def metadata(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    wanted = req.get("topics")
    all_topics = wanted is None or (v == 0 and not wanted)
    by_id = None
    if all_topics:
        names = sorted(t for t in s.store.topics() if allowed(s, ctx, "DESCRIBE", "TOPIC", t))
    else:
        names = []
        seen = set()
        # Kafka: a request naming any topic by id (KIP-516, v10+) is answered for its ids alone, its names ignored
        ids = v >= 10 and any(t["topic_id"].int for t in wanted)
        for t in wanted:
            if ids and not t["topic_id"].int:
                continue
            if t["name"] is None or ids:  # asked for by topic id (a null name from v10)
                if by_id is None:
                    by_id = yield s.loop.run_in_executor(None, _topics_by_id, s)
                name = by_id.get(t["topic_id"], t["topic_id"])
            else:
                name = t["name"]
            if name not in seen:  # Kafka answers each topic once
                seen.add(name)
                names.append(name)
    allow_create = req.get("allow_auto_topic_creation", True) if v >= 4 else True
    want_ops = bool(req.get("include_topic_authorized_operations"))
    topics = []
    created = 0
    sl = Slice()
    for name in names:
        if sl.due():
            yield
        if isinstance(name, uuid.UUID):  # an id no topic has (a null name is written from v12 only)
            topics.append({"error_code": UnknownTopicIdError.code, "name": None if v >= 12 else "",
                           "topic_id": name, "is_internal": False, "partitions": []})
            continue
        if not all_topics and not_allowed(s, ctx, "DESCRIBE", "TOPIC", name):
            topics.append({"error_code": TOPIC_DENIED, "name": name, "is_internal": False, "partitions": []})
            continue
        n = s.partitions(name) if isinstance(name, str) else 0
        err = 0
        if n == 0 and not all_topics:
            try:
                validate_topic_name(name)
            except (KafkaError, ValueError, TypeError):
                topics.append({"error_code": InvalidTopicError.code, "name": name, "is_internal": False,
                               "partitions": [], **_operations(s, ctx, name, want_ops)})
                continue
            if s.auto_create and allow_create and not allowed(s, ctx, "CREATE", "CLUSTER", security.CLUSTER_NAME) \
                    and not_allowed(s, ctx, "CREATE", "TOPIC", name):
                topics.append({"error_code": TOPIC_DENIED, "name": name, "is_internal": False, "partitions": []})
                continue
            if s.auto_create and allow_create and created >= AUTO_CREATE_PER_REQUEST:
                # bounded work per request: the rest are created by the client's next Metadata (it retries on
                # LEADER_NOT_AVAILABLE, as for a topic Kafka is still creating)
                err = LEADER_NOT_AVAILABLE
            elif s.auto_create and allow_create:
                created += 1
                try:
                    check_partition_budget(s, s.store.config["num.partitions"])
                    # registry write and fsyncs: off the loop
                    yield s.loop.run_in_executor(None, s.store.create_topic, name, s.store.config["num.partitions"])
                    log.info("auto-created topic %s (%d partitions) for %s", name, s.store.config["num.partitions"],
                             ctx.peer)
                except TopicAlreadyExistsError:
                    pass
                except KafkaError as e:
                    err = error_code(e)
                n = s.partitions(name)
            if n == 0 and not err:
                err = UnknownTopicOrPartitionError.code
        t = {"error_code": err, "name": name, "is_internal": name in INTERNAL_TOPICS,
             "partitions": [{"error_code": 0, "partition_index": p, "leader_id": s.node_id, "leader_epoch": 0,
                             "replica_nodes": [s.node_id], "isr_nodes": [s.node_id], "offline_replicas": []}
                            for p in range(n)]}
        if v >= 10 and n:
            tid = s.store.cached_topic_id(name)  # no file touched: a Metadata of every topic stays on the loop
            if tid is None:  # a topic of an older kafkalog gets its id (a registry write): off the loop
                try:
                    tid = yield s.loop.run_in_executor(None, s.store.topic_id, name)
                except UnknownTopicOrPartitionError:  # deleted meanwhile
                    t.update(error_code=UnknownTopicOrPartitionError.code, partitions=[])
            if tid is not None:
                t["topic_id"] = _topic_uuid(tid)
        t.update(_operations(s, ctx, name, want_ops))  # also a topic not found (Kafka's answer)
        topics.append(t)
    return (yield from answer_sliced(s, sl, header, {
        "throttle_time_ms": ctx.throttle_time_ms,
        "brokers": [{"node_id": s.node_id, "host": s.host, "port": s.port, "rack": None}],
        "cluster_id": CLUSTER_ID, "controller_id": s.node_id, "topics": topics,
        "error_code": 0}))  # v13's top-level error (KIP-1102's REBOOTSTRAP_REQUIRED: never, one node)


def _operations(s: Services, ctx, name: str, wanted: bool) -> dict:
    return {"topic_authorized_operations": _authorized_bits(s, ctx, "TOPIC", name)} if wanted else {}


def _topic_uuid(topic_id: str) -> uuid.UUID:
    """A topic id in Kafka's base64 text form as the wire's UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


def _topics_by_id(s: Services) -> dict:
    """{topic id: name} of every topic (a worker thread: a topic of an older kafkalog gets its id here)."""
    out = {}
    for name in s.store.topics():
        try:
            out[_topic_uuid(s.store.topic_id(name))] = name
        except UnknownTopicOrPartitionError:
            continue  # deleted meanwhile (by another connection or process): no id to find
    return out


# what a topic allows, in Kafka's AclOperation codes (authorized_operations bit n = operation code n)
_TOPIC_OPERATIONS = {"READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
                     "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11}


def _authorized_bits(s: Services, ctx, resource_type: str, name: str) -> int:
    bits = 0
    for op, code in _TOPIC_OPERATIONS.items():
        if allowed(s, ctx, op, resource_type, name):
            bits |= 1 << code
    return bits


# ---------------------------------------------------------------------------------------------------- Produce

def produce(s: Services, ctx, header, frame, offset):
    # hot path: the batches are memoryviews of the frame as received, stamped and written in place by the engine
    txn, acks, _timeout, topic_data = _wire.parse_produce(frame, offset, header.api_version)
    ids = None
    if header.api_version >= 13:  # KIP-516: topics by id; answered by id, an id no topic has UNKNOWN_TOPIC_ID
        ids = [tid for tid, _ in topic_data]
        by_id = s.store.topics_by_id()
        if any(tid not in by_id for tid in ids):
            by_id = yield s.loop.run_in_executor(None, _topics_by_id, s)
        topic_data = [(by_id.get(tid), parts) for tid, parts in topic_data]
    faults = s.faults
    if faults is not None and faults.active:  # a test's stalled partition: the request waits until it resumes
        while (held := faults.hold(s.loop, topic_data)) is not None:
            yield held
    txn_denied = txn is not None and not_allowed(s, ctx, "WRITE", "TRANSACTIONAL_ID", txn)
    added = None
    if txn is not None and not txn_denied and header.api_version >= 12:
        # transactions v2 (KIP-890 part 2): the leader adds the partitions of the producer's transactional batches
        # to its transaction (Kafka's AddPartitionsToTxn v5 with VerifyOnly=false, here an in-process call)
        wanted = _implicit_adds(s, ctx, txn, topic_data)
        if wanted:
            added = yield _off_loop(s, _add_implicitly, s, txn, wanted)
    responses = []
    failed = False
    auth = s.authorizer is not None
    synced = [] if acks == -1 else None  # acks=all: partitions whose answer waits for their group commit
    sl = Slice()
    refused = 0
    for name, partitions in topic_data:
        parts = []
        if name is None:  # a topic id no topic has (v13+)
            parts = [(idx, UnknownTopicIdError.code, -1, -1, -1) for idx, _ in partitions]
            responses.append((name, parts))
            failed = True
            continue
        denied = auth and not_allowed(s, ctx, "WRITE", "TOPIC", name)
        for idx, records in partitions:
            if sl.due():
                yield
            code = 0
            base = append_time = lso = -1
            lg = None
            if denied or txn_denied:
                parts.append((idx, security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID" if txn_denied else "TOPIC"], base,
                              append_time, lso))
                failed = True
                continue
            if added is not None and (code := added.get((name, idx), 0)):
                parts.append((idx, code, base, append_time, lso))  # the implicit add was refused: nothing appended
                failed = True
                continue
            if faults is not None and (code := faults.produce_error(name, idx)):
                parts.append((idx, code, base, append_time, lso))  # a test's injected refusal: nothing appended
                failed = True
                continue
            try:
                lg = s.log(name, idx)
                if records is None or not len(records):
                    raise InvalidRequestError(f"produce to {name}-{idx} carries no record batch")
                _check_transactional(s, txn, name, idx, records)
                dup = s.producers.check(name, idx, lg, records)
                if dup is not None:
                    base = dup
                else:
                    base = lg.append_records(records)[0]
                    s.producers.appended(name, idx, records, base)
                    if lg.log_append_time:
                        append_time = RecordBatch(records).max_timestamp  # stamped by the append
                lso = lg.last_known_log_start_offset  # fresh: the append just synced this view
                if synced is not None:
                    synced.append((name, idx, len(parts)))
            except KafkaError as e:
                code = error_code(e)
                failed = True
                if lg is not None and code not in _PRODUCE_UNKNOWN_APPEND:
                    lso = lg.last_known_log_start_offset  # Kafka's processFailedRecord answers the log start
                if not isinstance(e, UnknownTopicOrPartitionError):
                    refused += 1
                    if refused <= 3:
                        log.warning("produce from %s to %s-%d refused: %s", ctx.peer, name, idx, e)
                record_errors = getattr(e, "record_errors", None)
                if record_errors is not None:  # KIP-467 (v8+): which records made the batch be dropped, and why
                    parts.append((idx, code, base, append_time, lso, record_errors, str(e)))
                    continue
            except (ValueError, TypeError) as e:
                code = 2  # CORRUPT_MESSAGE: a batch our parser rejects
                failed = True
                refused += 1
                if refused <= 3:
                    log.warning("produce from %s to %s-%d refused: %s", ctx.peer, name, idx, e)
            parts.append((idx, code, base, append_time, lso))
        responses.append((name, parts))
    if refused > 3:
        log.warning("produce from %s: %d more partitions refused", ctx.peer, refused - 3)
    if s.quotas.enabled:  # KIP-13: appended first, then the request's bytes count against the client's quota
        ctx.throttle_time_ms = s.quotas.record_produce(ctx.client_id, len(frame) + 4)
    if acks == 0:
        if failed:  # Kafka's answer to a failed acks=0 produce: close, so the client notices
            ctx.connection.close("acks=0 produce failed (see the previous line)")
        return None
    if synced:
        return Pipelined(_produce_synced(s, ctx, header, responses, synced, ctx.throttle_time_ms, ids))
    return [_encode_produce(header, responses, ctx.throttle_time_ms, ids)]


def _encode_produce(header, responses, throttle_time_ms: int, ids) -> bytes:
    if ids is not None:  # v13+: each topic answered by the id it was asked by
        responses = [(tid, parts) for tid, (_, parts) in zip(ids, responses)]
    return _wire.encode_produce_response(header.api_version, header.correlation_id, responses, throttle_time_ms)


# errors Kafka's ReplicaManager answers with an unknown append info (log_start_offset -1); any other refusal of a
# partition it holds carries the partition's log start offset
_PRODUCE_UNKNOWN_APPEND = frozenset({UnknownTopicOrPartitionError.code, 6, 10, 18, 2, KafkaStorageError.code})


# the coordinator's answers to a leader's implicit add, as Kafka's leader passes them on (AddPartitionsToTxnManager,
# ReplicaManager): a fenced producer is INVALID_PRODUCER_EPOCH; the coordinator busy or away is NOT_ENOUGH_REPLICAS,
# which the producer retries
_ADD_BUSY = frozenset({51, 14, 15, 16})  # CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS/NOT_AVAILABLE, NOT_C.
NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH = 19, 47
_ADD_RETRY_S, _ADD_RETRY_MAX_S = 0.02, 0.1  # add.partitions.to.txn.retry.backoff.ms / .max.ms


def _implicit_adds(s: Services, ctx, txn: str, topic_data) -> dict:
    """{(producer id, epoch): [TopicPartition]} of the transactional batches whose partition is not yet in the
    producer's open transaction (partitions that exist and may be written; the others are refused later)."""
    wanted: dict = {}
    auth = s.authorizer is not None
    for name, partitions in topic_data:
        if name is None or auth and not_allowed(s, ctx, "WRITE", "TOPIC", name):
            continue
        n = s.partitions(name)
        for idx, records in partitions:
            if records is None or not len(records) or not 0 <= idx < n:
                continue
            try:
                batch = next(iter_batches(records), None)
            except (ValueError, TypeError, KafkaError):
                continue
            if batch is None or not batch.is_transactional:
                continue
            tp = TopicPartition(name, idx)
            if not s.txn.in_transaction(txn, batch.producer_id, batch.producer_epoch, tp):
                wanted.setdefault((batch.producer_id, batch.producer_epoch), []).append(tp)
    return wanted


def _add_implicitly(s: Services, txn: str, wanted: dict) -> dict:
    """The implicit adds (worker thread): {(topic, partition): error code} of the refused ones. CONCURRENT_
    TRANSACTIONS (the previous transaction's markers still being written) is retried for up to 100 ms first."""
    out = {}
    for (pid, epoch), tps in wanted.items():
        waited = 0.0
        while True:
            try:
                s.txn.add_partitions(txn, pid, epoch, tps, client_tv=2)
                code = 0
            except KafkaError as e:
                code = error_code(e)
                if code in _ADD_BUSY and waited < _ADD_RETRY_MAX_S:
                    time.sleep(_ADD_RETRY_S)
                    waited += _ADD_RETRY_S
                    continue
                log.info("implicit AddPartitionsToTxn of %s for transactional id %r refused: %s",
                         ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps), txn, e)
            break
        if code:
            code = INVALID_PRODUCER_EPOCH if code == ProducerFencedError.code else \
                NOT_ENOUGH_REPLICAS if code in _ADD_BUSY else code
            out.update({(tp.topic, tp.partition): code for tp in tps})
    return out


def _check_transactional(s: Services, txn, topic: str, partition: int, records) -> None:
    """Transactional batches only from the current producer of an open transaction that holds the partition
    (Kafka's verification, KIP-890 part 1); transactional batches only with a transactional id, and the other way
    round."""
    for batch in iter_batches(records):
        if batch.is_transactional:
            if txn is None:
                raise InvalidTxnStateError(f"a transactional batch for {topic}-{partition} came without a "
                                           f"transactional id")
            s.txn.check_produce(txn, batch.producer_id, batch.producer_epoch, TopicPartition(topic, partition))
        elif txn is not None:
            raise InvalidTxnStateError(f"a produce with transactional id {txn!r} carries a batch for "
                                       f"{topic}-{partition} that is not transactional")


class Pipelined:
    """A handler's answer that waits only for the disk (an acks=all produce's group commit): the connection serves
    its next requests meanwhile and sends the answers in request order."""

    __slots__ = ("coro",)

    def __init__(self, coro):
        self.coro = coro


async def _produce_synced(s: Services, ctx, header, responses, synced, throttle_time_ms: int, ids=None):
    """acks=all on a single node: the answer goes out once the records are fsynced (there are no replicas to
    wait for). Each partition's group commit covers every request appended before its fsync started."""
    by_topic = {name: parts for name, parts in responses}
    keys = [(name, idx) for name, idx, _ in synced]
    results = await asyncio.gather(*(s.group_commit(name, idx) for name, idx in keys), return_exceptions=True)
    for (name, idx, i), r in zip(synced, results):
        if isinstance(r, BaseException):
            if isinstance(r, asyncio.CancelledError):
                raise r
            if isinstance(r, (UnknownTopicOrPartitionError, LogClosedError)):
                # the topic was deleted before its fsync: answered as such (the records went with the topic)
                r = UnknownTopicOrPartitionError(f"{name}-{idx} was deleted")
            else:
                log.error("acks=all produce from %s to %s-%d: fsync failed: %s", ctx.peer, name, idx, r)
            parts = by_topic[name]
            parts[i] = (idx, error_code(r) if isinstance(r, KafkaError) else KafkaStorageError.code, -1, -1, -1)
    return [_encode_produce(header, responses, throttle_time_ms, ids)]


# ---------------------------------------------------------------------------------------------------- Fetch

def fetch(s: Services, ctx, header, frame, offset):
    req = _wire.parse_fetch(frame, offset, header.api_version)
    v = header.api_version
    names = None
    if v >= TOPIC_IDS_FROM:
        # KIP-516: topics by id. Ids the registry does not hold yet may be topics of an older kafkalog (or a Kafka
        # log dir) without an id on record: those get theirs off the loop, once, before the answer is UNKNOWN_TOPIC_ID
        names = s.store.topics_by_id()
        if any(t["topic_id"] not in names for t in req["topics"]):
            names = yield s.loop.run_in_executor(None, _topics_by_id, s)
        fetch_data = [(t["topic_id"], p["partition"], p["fetch_offset"], p["log_start_offset"],
                       p["partition_max_bytes"]) for t in req["topics"] for p in t["partitions"]]
        forgotten = [(t["topic_id"], i) for t in req["forgotten_topics_data"] for i in t["partitions"]]
    else:
        fetch_data = [(t["topic"], p["partition"], p["fetch_offset"], p["log_start_offset"], p["partition_max_bytes"])
                      for t in req["topics"] for p in t["partitions"]]
        forgotten = [(t["topic"], i) for t in req["forgotten_topics_data"] for i in t["partitions"]]
    # KIP-227: the session decides which partitions this fetch covers (a full fetch: the request's; an incremental
    # one: every partition of the session, in its rotation order)
    fctx = s.fetch_sessions.new_context(v, req["session_id"], req["session_epoch"], fetch_data, forgotten,
                                        names=names)
    if fctx.error_code:  # FETCH_SESSION_ID_NOT_FOUND (70) / INVALID_FETCH_SESSION_EPOCH (71) /
        # FETCH_SESSION_TOPIC_ID_ERROR (106), top level (KIP-227)
        return _wire.encode_fetch_response(v, header.correlation_id, ctx.throttle_time_ms, fctx.error_code, 0, [])
    parts = [(t, name, {"partition": p, "fetch_offset": off, "partition_max_bytes": mb})
             for t, p, off, mb, name in fctx.partitions_to_read()]
    req["fctx"] = fctx
    req["names"] = names
    if s.authorizer is not None:
        denied = {name for _t, name, _p in parts if name is not None and not_allowed(s, ctx, "READ", "TOPIC", name)}
        if denied:
            req["denied"] = denied
    result, size = yield from _fetch_once(s, parts, req.get("max_bytes", 0x7FFFFFFF), req.get("denied"),
                                          req.get("isolation_level", 0) == 1, names)
    max_wait = req["max_wait_ms"] / 1000.0
    # Kafka's ReplicaManager answers at once when there is nothing to wait for: no partition (an empty sessionless
    # fetch, a new session's first request without partitions, the session close a Java consumer sends), enough
    # bytes, no wait, or an error
    if not parts or size >= max(req["min_bytes"], 1) or max_wait <= 0 or \
            any(r["error_code"] for r in result.values()):
        return _fetch_response(s, header, ctx, req, result)
    return _fetch_wait(s, ctx, header, req, parts, max_wait)


async def _fetch_wait(s, ctx, header, req, parts, max_wait):
    deadline = time.monotonic() + max_wait
    fut = s.loop.create_future()
    tps = [TopicPartition(name, p["partition"]) for _t, name, p in parts if name is not None]
    for tp in tps:
        s.waiters.setdefault(tp, set()).add(fut)
    read = functools.partial(_fetch_once, s, parts, req.get("max_bytes", 0x7FFFFFFF), req.get("denied"),
                             req.get("isolation_level", 0) == 1, req["names"])
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                # appends through this process wake the future; other processes' appends are seen every 100 ms
                await asyncio.wait_for(asyncio.shield(fut), min(remaining, s.other_writers_poll_s))
            except TimeoutError:
                pass
            if fut.done():
                fut = s.loop.create_future()
                for tp in tps:
                    s.waiters.setdefault(tp, set()).add(fut)
            if _any_new(s, parts):
                result, size = await finish(read())
                if size >= req["min_bytes"] or any(r["error_code"] for r in result.values()):
                    return _fetch_response(s, header, ctx, req, result)
    finally:
        for tp in tps:
            w = s.waiters.get(tp)
            if w is not None:
                w.discard(fut)
                if not w:
                    del s.waiters[tp]
    result, _ = await finish(read())
    return _fetch_response(s, header, ctx, req, result)


def _any_new(s, parts) -> bool:
    faults = s.faults
    for _t, name, p in parts:
        if name is None:
            continue
        if faults is not None and faults.active and faults.stalled(name, p["partition"]):
            continue
        try:
            if s.log(name, p["partition"]).has_data_after(p["fetch_offset"]):
                return True
        except KafkaError:
            return True
    return False


# errors Kafka finds before reading (KafkaApis.handleFetchRequest): those partitions come after the ones read, in
# the response and in a new session's order
_REFUSED_BEFORE_READ = frozenset({UnknownTopicIdError.code, TOPIC_DENIED, UnknownTopicOrPartitionError.code})


def _fetch_once(s, parts, max_bytes, denied=None, read_committed=False, names=None):
    """(result per (topic, partition), bytes) of one read of every partition; a generator (time slices).
    read_committed: each partition's records end at its last stable offset, with the aborted transactions they may
    hold. ``parts``: (topic, name, {"partition", "fetch_offset", "partition_max_bytes"}), topic the name or, with
    ``names`` ({topic id: name}, v13+), the topic id. The result lists the partitions refused before any read last."""
    result = {}
    refused = None
    total = 0
    sl = Slice()
    faults = s.faults
    for topic, name, p in parts:
        if sl.due():
            yield
        idx = p["partition"]
        r = {"error_code": 0, "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
             "records": b"", "aborted": None}  # records empty, not null: kafka-python reads len() of it
        if name is None:
            r["error_code"] = UnknownTopicIdError.code
        elif denied and name in denied:
            r["error_code"] = security.DENIAL_ERROR_CODE["TOPIC"]
        elif faults is not None and faults.active and faults.stalled(name, idx):
            # a test's stalled partition: no records, its offsets as they are
            try:
                lg = s.log(name, idx)
                r.update(high_watermark=lg.high_watermark, last_stable_offset=lg.last_stable_offset,
                         log_start_offset=lg.log_start_offset)
            except KafkaError as e:
                r["error_code"] = error_code(e)
        else:
            try:
                lg = s.log(name, idx)
                if names is not None and names.get(topic) != name:
                    # the session's id names a topic deleted since (and made again under its name)
                    raise InconsistentTopicIdError(f"topic id {topic} is not {name}'s")
                budget = min(p["partition_max_bytes"], max_bytes - total)
                # KIP-74: the first partition with data returns at least one whole batch, whatever the budget
                start, hwm, lso, data, aborted = lg.fetch_isolated(
                    p["fetch_offset"], max(budget, 1) if total == 0 else budget, read_committed)
                if data is not None and total > 0 and len(data) > budget:
                    data = None
                if data is not None:
                    total += len(data)
                r.update(high_watermark=hwm, last_stable_offset=lso, log_start_offset=start,
                         records=data if data is not None else b"", aborted=aborted if data is not None else None)
            except KafkaError as e:
                r["error_code"] = error_code(e)
        if r["error_code"] in _REFUSED_BEFORE_READ:
            if refused is None:
                refused = {}
            refused[(topic, idx)] = r
        else:
            result[(topic, idx)] = r
    if refused:
        result.update(refused)
    return result, total


def _fetch_response(s, header, ctx, req, result):
    fctx = req["fctx"]
    v = header.api_version
    if s.quotas.enabled:
        size = sum(len(r["records"]) for r in result.values() if r["records"] is not None)
        throttle = s.quotas.record_fetch(ctx.client_id, size)
        if throttle > 0:
            # over quota: the read is not sent (its bytes were taken back), the answer is empty (KIP-219); a full
            # fetch creates no session, an incremental one uses up its epoch
            ctx.throttle_time_ms = throttle
            sid = fctx.throttled_response()
            return _wire.encode_fetch_response(v, header.correlation_id, throttle, fctx.error_code, sid, [])
    sid, out = fctx.build_response({tp: PartitionResult(r["error_code"], r["high_watermark"], r["last_stable_offset"],
                                                        r["log_start_offset"], r["records"], len(r["records"]),
                                                        r.get("aborted"))
                                    for tp, r in result.items()})
    if fctx.error_code:  # a stale incremental request (a duplicate that was overtaken): INVALID_FETCH_SESSION_EPOCH
        return _wire.encode_fetch_response(v, header.correlation_id, ctx.throttle_time_ms, fctx.error_code, sid, [])
    # partitions of one topic next to each other share its entry, as Kafka's FetchResponse.of groups them (a topic
    # whose partitions are apart in the order gets an entry for each run)
    topics = []
    last = lst = None
    for topic, idx, r in out:
        if topic != last or lst is None:
            lst = []
            topics.append((topic, lst))
            last = topic
        lst.append((idx, r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.records,
                    r.aborted))
    # header bytes, then the segment slices themselves: no copy of record data
    return _wire.encode_fetch_response(v, header.correlation_id, ctx.throttle_time_ms, 0, sid, topics)


# ---------------------------------------------------------------------------------------------------- ListOffsets

# ListOffsets' special timestamps (ListOffsetsRequest.java) and the first version that may send each
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3                     # v1+, v1+, v7+ (KIP-734)
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6  # v8+ (KIP-405), v9+ (KIP-1005), v11+ (KIP-1023)
_TIMESTAMP_FROM = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}
# the leader epoch of an offset found: one node, never a leader change, so always Kafka's first epoch
LEADER_EPOCH = 0


def list_offsets(s: Services, ctx, header, frame, offset):
    """ListOffsets, answered as one Kafka node without tiered storage: the local log is the whole log, so
    EARLIEST_LOCAL (-4) is the log start offset, and LATEST_TIERED (-5) / EARLIEST_PENDING_UPLOAD (-6) find no
    offset (-1, no error). v10's timeout_ms (remote-storage reads) has nothing to wait for."""
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    committed = req.get("isolation_level", 0) == 1

    def check(p):  # before the partition is looked up: Kafka's order
        ts = p["timestamp"]
        if ts < 0 and v < _TIMESTAMP_FROM.get(ts, 1 if ts >= EARLIEST else 1 << 16):
            raise UnsupportedVersionError(f"ListOffsets timestamp {ts} is not supported at v{v}")

    def lookup(lg, _topic, p, r):
        ts = p["timestamp"]
        if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            return  # nothing is tiered: no offset
        if committed and ts == LATEST:  # LATEST for read_committed: the last stable offset
            r.update(offset=lg.last_stable_offset, leader_epoch=LEADER_EPOCH)
            return
        # the engine's time index: -1 latest, -2 earliest, -3 max timestamp
        found = lg.offset_for_time(EARLIEST if ts == EARLIEST_LOCAL else ts)
        if found is not None:
            if committed and ts >= 0 and found.offset >= lg.last_stable_offset:
                return  # not readable by a read_committed consumer yet: no offset (Kafka's answer)
            r.update(offset=found.offset, timestamp=found.timestamp, leader_epoch=LEADER_EPOCH)
    sl = Slice()
    topics = yield from _each_partition(s, ctx, req["topics"], "DESCRIBE", {"timestamp": -1, "offset": -1,
                                                                            "leader_epoch": -1}, lookup, sl,
                                        check)
    return (yield from answer_sliced(s, sl, header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": topics}))


# ------------------------------------------------------------------------------------------------- OffsetForLeaderEpoch

def offset_for_leader_epoch(s: Services, ctx, header, frame, offset):
    """OffsetForLeaderEpoch (KIP-101, KIP-320) as one Kafka node answers it, whose every partition has had one
    leader epoch, 0 (LEADER_EPOCH, what Metadata and ListOffsets say), since its log start: epoch 0 ends at the log
    end offset; an epoch above it, or -1, is unknown (-1, -1); one below -1 comes before the first known epoch,
    answered with epoch 0's start offset (Kafka's LeaderEpochFileCache.endOffsetFor). The client's current leader
    epoch, when given, must be 0: FENCED_LEADER_EPOCH below, UNKNOWN_LEADER_EPOCH above. CLUSTER_ACTION on the
    cluster, else DESCRIBE on each topic."""
    req = request_body(ctx, header, frame, offset)
    cluster = allowed(s, ctx, "CLUSTER_ACTION", "CLUSTER", security.CLUSTER_NAME)
    sl = Slice()
    out = []
    for t in req["topics"]:
        name = t["topic"]
        code = 0 if cluster or allowed(s, ctx, "DESCRIBE", "TOPIC", name) else TOPIC_DENIED
        n = s.partitions(name) if not code else 0
        parts = []
        for p in t["partitions"]:
            if sl.due():
                yield
            idx, current, wanted = p["partition"], p.get("current_leader_epoch", -1), p["leader_epoch"]
            r = {"error_code": code, "partition": idx, "leader_epoch": -1, "end_offset": -1}
            if not code:
                if not 0 <= idx < n:
                    r["error_code"] = UnknownTopicOrPartitionError.code
                elif current != -1 and current != LEADER_EPOCH:
                    stale = current < LEADER_EPOCH
                    r["error_code"] = (FencedLeaderEpochError if stale else UnknownLeaderEpochError).code
                elif wanted == LEADER_EPOCH:
                    r.update(leader_epoch=LEADER_EPOCH, end_offset=s.log(name, idx).log_end_offset)
                elif wanted < -1:
                    r.update(leader_epoch=wanted, end_offset=s.log(name, idx).log_start_offset)
            parts.append(r)
        out.append({"topic": name, "partitions": parts})
    return (yield from answer_sliced(s, sl, header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": out}))


# ---------------------------------------------------------------------------------------------------- DeleteRecords

def delete_records(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)

    def delete(lg, topic, p, r):
        def run():  # a worker thread: the new log start is made durable (fsync) before the answer
            r["low_watermark"] = lg.delete_records_before(p["offset"])
            log.info("delete-records %s-%d before %d by %s: log start offset now %d", topic, p["partition_index"],
                     p["offset"], ctx.peer, r["low_watermark"])
        return s.loop.run_in_executor(None, run)
    # KIP-107: DeleteRecords is authorized as DELETE on the TOPIC; a denial changes nothing
    sl = Slice()
    topics = yield from _each_partition(s, ctx, req["topics"], "DELETE", {"low_watermark": -1}, delete, sl)
    return (yield from answer_sliced(s, sl, header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": topics}))


def _each_partition(s, ctx, topics, operation: str, blank: dict, work, sl: Slice, check=None) -> list:
    """Kafka's per-partition answer: ``operation`` on each TOPIC checked once (a denial answers 29 for its
    partitions), ``check(partition request)`` then ``work(log, topic, partition request, answer)`` per partition, a
    KafkaError answered as that partition's error code while the others go on. A generator (time slices); ``work``
    may return an awaitable to be waited for (work done off the loop)."""
    out = []
    for t in topics:
        name = t["name"]
        denied = not_allowed(s, ctx, operation, "TOPIC", name)
        parts = []
        for p in t["partitions"]:
            if sl.due():
                yield
            r = {"partition_index": p["partition_index"], "error_code": 0, **blank}
            if denied:
                r["error_code"] = TOPIC_DENIED
            else:
                try:
                    if check is not None:
                        check(p)
                    pending = work(s.log(name, p["partition_index"]), name, p, r)
                    if pending is not None:
                        yield pending  # done off the loop; its exception comes back here
                except KafkaError as e:
                    r["error_code"] = error_code(e)
            parts.append(r)
        out.append({"name": name, "partitions": parts})
    return out


# ---------------------------------------------------------------------------------------------------- topics

def create_topics(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    cluster_create = allowed(s, ctx, "CREATE", "CLUSTER", security.CLUSTER_NAME)
    for t in req["topics"]:
        name = t["name"]
        r = {"name": name, "error_code": 0, "error_message": None}
        if not cluster_create and not_allowed(s, ctx, "CREATE", "TOPIC", name):
            r["error_code"] = TOPIC_DENIED
            r["error_message"] = f"{ctx.principal} may not create topic {name!r}"
            out.append(r)
            continue
        try:
            n = t["num_partitions"]
            rf = t["replication_factor"]
            if t.get("assignments"):
                if n != -1 or rf != -1:
                    raise InvalidRequestError("both replica assignments and partitions/replication factor given")
                n = len(t["assignments"])
                if any(list(a["broker_ids"]) != [s.node_id] for a in t["assignments"]):
                    raise InvalidReplicationFactorError(f"replica assignment must name only broker {s.node_id}")
            if rf not in (-1, 1):
                raise InvalidReplicationFactorError(f"replication factor {rf} is larger than the 1 broker here")
            if n == -1:
                n = s.store.config["num.partitions"]
            if n < 1:
                raise InvalidPartitionsError(f"number of partitions must be at least 1, got {n}")
            check_partition_budget(s, n)
            validate_topic_name(name)
            if name in INTERNAL_TOPICS:
                raise TopicAlreadyExistsError(f"topic {name!r} is internal")
            configs = {c["name"]: c["value"] for c in t.get("configs", [])}
            if req.get("validate_only"):
                if s.partitions(name):
                    raise TopicAlreadyExistsError(f"topic {name!r} already exists")
                from ..config import TOPIC, Config
                overrides = Config(configs, scope=TOPIC).overrides
            else:
                # the registry write and its fsyncs: off the loop
                yield s.loop.run_in_executor(None, s.store.create_topic, name, n, configs)
                log.info("created topic %s (%d partitions) for %s", name, n, ctx.peer)
                overrides = s.store.topic_config(name).overrides
            if header.api_version >= 5:  # what was made: partitions, replication, every config with its source
                r.update(num_partitions=n, replication_factor=1, configs=_created_configs(s, overrides))
                if header.api_version >= 7 and not req.get("validate_only"):
                    tid = s.store.cached_topic_id(name) or (yield s.loop.run_in_executor(None, s.store.topic_id,
                                                                                          name))
                    r["topic_id"] = _topic_uuid(tid)
        except TopicAlreadyExistsError as e:
            r["error_code"] = error_code(e)
            r["error_message"] = f"Topic '{name}' already exists."  # Kafka's words (the store's name the data dir)
        except KafkaError as e:
            r["error_code"] = error_code(e)
            r["error_message"] = str(e)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": out})


_CONFIG_SOURCE = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}


def _created_configs(s: Services, overrides: dict) -> list:
    """CreateTopics v5+'s configs of a new topic: every topic key, its value and where the value comes from."""
    from ..client.admin import _topic_config_entries
    return [{"name": k, "value": e["value"], "read_only": False, "config_source": _CONFIG_SOURCE[e["config_source"]],
             "is_sensitive": False}
            for k, e in sorted(_topic_config_entries(s.store.config, overrides, False).items())]


# Kafka's default texts of DeleteTopics' errors (v5+'s ErrorMessage; null on success)
_DELETE_TEXT = {
    TOPIC_DENIED: "Topic authorization failed.",
    CLUSTER_DENIED: "Cluster authorization failed.",
    UnknownTopicOrPartitionError.code: "This server does not host this topic-partition.",
    UnknownTopicIdError.code: "This server does not host this topic ID.",
}
_NO_ID = uuid.UUID(int=0)


def delete_topics(s: Services, ctx, header, frame, offset):
    """DeleteTopics, as Kafka's controller answers it: v6 names each topic by name or by id (KIP-516), never both;
    a duplicate, an entry with neither, or a name whose id was given too is INVALID_REQUEST and deletes nothing for
    that topic; an unknown id is UNKNOWN_TOPIC_ID. v5+ carries Kafka's error messages."""
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    entries = req["topics"] if v >= 6 else [{"name": n, "topic_id": _NO_ID} for n in req["topic_names"]]
    if not s.config["delete.topic.enable"]:  # Kafka fails the whole request: every entry, no message
        code = TopicDeletionDisabledError.code if v >= 3 else InvalidRequestError.code
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "responses": [
            {"name": e["name"], "topic_id": e["topic_id"], "error_code": code} for e in entries]})
    out = []  # (position of the entry in the request, its result): answered in the request's order

    def answer(at, name, tid, code, message=None):
        out.append((at, {"name": name, "topic_id": tid, "error_code": code,
                         "error_message": message if message is not None or not code else _DELETE_TEXT.get(code)}))

    names: dict[str, int] = {}  # name or id -> position of its first entry (ordered)
    ids: dict[uuid.UUID, int] = {}
    dup_names: dict[str, int] = {}
    dup_ids: dict[uuid.UUID, int] = {}
    for at, e in enumerate(entries):
        name, tid = e["name"], e["topic_id"]
        if name is None and not tid.int:
            answer(at, None, _NO_ID, InvalidRequestError.code, "Neither topic name nor id were specified.")
        elif name is not None and tid.int:
            answer(at, name, tid, InvalidRequestError.code, "You may not specify both topic name and topic id.")
        else:
            seen, dups, key = (names, dup_names, name) if name is not None else (ids, dup_ids, tid)
            if key in dups or key in seen:
                dups.setdefault(key, seen.pop(key, at))
            else:
                seen[key] = at
    for name, at in dup_names.items():
        answer(at, name, _NO_ID, InvalidRequestError.code, "Duplicate topic name.")
    for tid, at in dup_ids.items():
        answer(at, None, tid, InvalidRequestError.code, "Duplicate topic id.")
    cluster_delete = allowed(s, ctx, "DELETE", "CLUSTER", security.CLUSTER_NAME)

    def deletable(name):
        return cluster_delete or not not_allowed(s, ctx, "DELETE", "TOPIC", name)

    def describable(name):
        return cluster_delete or allowed(s, ctx, "DESCRIBE", "TOPIC", name)
    doomed: dict[uuid.UUID | str, tuple[int, str]] = {}  # id (a topic without one: its name) -> (position, name)
    if ids:
        by_id = yield s.loop.run_in_executor(None, _topics_by_id, s)
        for tid, at in ids.items():
            name = by_id.get(tid)
            if name is None:
                answer(at, None, tid, UnknownTopicIdError.code)
            elif not deletable(name):  # the name only to whom may see the topic
                answer(at, name if describable(name) else None, tid, TOPIC_DENIED)
            else:
                doomed[tid] = (at, name)
    for name, at in names.items():
        if not describable(name):
            answer(at, name, _NO_ID, TOPIC_DENIED)
            continue
        if name not in INTERNAL_TOPICS and not s.partitions(name):
            answer(at, name, _NO_ID, UnknownTopicOrPartitionError.code)
            continue
        if not deletable(name):
            answer(at, name, _NO_ID, TOPIC_DENIED)
            continue
        tid = name
        if v >= 6 and name not in INTERNAL_TOPICS:
            try:
                tid = _topic_uuid(s.store.cached_topic_id(name)
                                  or (yield s.loop.run_in_executor(None, s.store.topic_id, name)))
            except UnknownTopicOrPartitionError:  # deleted meanwhile
                answer(at, name, _NO_ID, UnknownTopicOrPartitionError.code)
                continue
        if tid in doomed or tid in dup_ids:  # also given by its id: Kafka deletes neither
            doomed.pop(tid, None)
            answer(at, name, tid, InvalidRequestError.code, "The provided topic name maps to an ID that was already "
                                                            "supplied.")
            continue
        doomed[tid] = (at, name)
    for tid, (at, name) in doomed.items():
        tid = tid if isinstance(tid, uuid.UUID) else _NO_ID
        try:
            if name in INTERNAL_TOPICS:
                raise ClusterAuthorizationFailedError(f"topic {name!r} is internal")
            s.forget_topic(name)
            yield s.loop.run_in_executor(None, s.store.delete_topic, name)  # renames, fsyncs, removal: off the loop
            s.producers.forget_topic(name)
            log.info("deleted topic %s for %s", name, ctx.peer)
            answer(at, name, tid, 0)
        except KafkaError as e:
            answer(at, name, tid, error_code(e), _DELETE_TEXT.get(error_code(e), str(e)))
    out.sort(key=lambda r: r[0])
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "responses": [r for _, r in out]})


# ---------------------------------------------------------------------------------------------------- producers

def init_producer_id(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    txn = req.get("transactional_id")
    if txn is not None:
        if not_allowed(s, ctx, "WRITE", "TRANSACTIONAL_ID", txn):
            code, pid, epoch = security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID"], -1, -1
        else:
            try:
                pid, epoch = yield _off_loop(s, s.txn.init_producer_id, txn, req["transaction_timeout_ms"],
                                             req.get("producer_id", -1), req.get("producer_epoch", -1))
                code = 0
            except KafkaError as e:
                code, pid, epoch = _txn_code(e, v, 4), -1, -1
                _log_txn_refusal(ctx, "InitProducerId", txn, e)
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": code, "producer_id": pid,
                              "producer_epoch": epoch})
    if s.authorizer is not None and not allowed(s, ctx, "IDEMPOTENT_WRITE", "CLUSTER", security.CLUSTER_NAME) \
            and not s.authorizer.authorize_by_resource_type(ctx.principal, ctx.connection.peer_host, "WRITE", "TOPIC"):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": CLUSTER_DENIED,
                              "producer_id": -1, "producer_epoch": -1})
    pid = s.producers.new_producer_id()
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "producer_id": pid,
                          "producer_epoch": 0})


# ---------------------------------------------------------------------------------------------------- transactions
# The coordinator's calls append to __transaction_state and write markers, each fsynced: they run on worker threads
# (the coordinator serialises them), so the loop serves everyone else meanwhile.

def _off_loop(s: Services, fn, *args):
    return s.loop.run_in_executor(None, functools.partial(fn, *args))


def _txn_code(e: KafkaError, version: int, fenced_from: int) -> int:
    """The wire code of a coordinator error: PRODUCER_FENCED (90) exists from ``fenced_from`` on (KIP-588); older
    versions get INVALID_PRODUCER_EPOCH (47), which their clients take for fencing."""
    if isinstance(e, ProducerFencedError) and version < fenced_from:
        return 47
    return error_code(e)


def _log_txn_refusal(ctx, api: str, txn: str, e: KafkaError) -> None:
    if not getattr(e, "retriable", False):
        log.info("%s from %s for transactional id %r refused: %s", api, ctx.peer, txn, e)


def add_partitions_to_txn(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if header.api_version >= 4:
        return (yield from _add_partitions_batched(s, ctx, header, req))
    txn = req["v3_and_below_transactional_id"]
    pid, epoch = req["v3_and_below_producer_id"], req["v3_and_below_producer_epoch"]
    wanted = [(t["name"], list(t["partitions"])) for t in req["v3_and_below_topics"]]
    codes: dict[tuple[str, int], int] = {}
    if not_allowed(s, ctx, "WRITE", "TRANSACTIONAL_ID", txn):
        codes = {(n, i): security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID"] for n, ps in wanted for i in ps}
    else:
        # a partition that cannot be added fails the request; the others are answered OPERATION_NOT_ATTEMPTED
        for name, ps in wanted:
            code = TOPIC_DENIED if not_allowed(s, ctx, "WRITE", "TOPIC", name) else 0
            n = s.partitions(name) if not code else 0
            for i in ps:
                if not code and not 0 <= i < n:
                    codes[(name, i)] = UnknownTopicOrPartitionError.code
                elif code:
                    codes[(name, i)] = code
        if codes:
            for name, ps in wanted:
                for i in ps:
                    codes.setdefault((name, i), OperationNotAttemptedError.code)
        else:
            try:
                yield s.txn_adds.call(txn, pid, epoch, [TopicPartition(n, i) for n, ps in wanted for i in ps], 0)
                code = 0
            except KafkaError as e:
                code = _txn_code(e, header.api_version, 2)
                _log_txn_refusal(ctx, "AddPartitionsToTxn", txn, e)
            codes = {(n, i): code for n, ps in wanted for i in ps}
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results_by_topic_v3_and_below": [
        {"name": n, "results_by_partition": [{"partition_index": i, "partition_error_code": codes[(n, i)]}
                                             for i in ps]}
        for n, ps in wanted]})


def _add_partitions_batched(s: Services, ctx, header, req):
    """AddPartitionsToTxn v4+ (KIP-890): a partition leader asks the coordinator for several transactions at once,
    to verify (VerifyOnly: NONE if the partition is in the transaction, else TRANSACTION_ABORTABLE) or to add them
    (transactions v2). CLUSTER_ACTION on the cluster, else a top-level
    CLUSTER_AUTHORIZATION_FAILED."""
    if not_allowed(s, ctx, "CLUSTER_ACTION", "CLUSTER", security.CLUSTER_NAME):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": CLUSTER_DENIED,
                                "results_by_transaction": []})
    results = []
    for t in req["transactions"]:
        txn, pid, epoch = t["transactional_id"], t["producer_id"], t["producer_epoch"]
        wanted = [(x["name"], list(x["partitions"])) for x in t["topics"]]
        tps = [TopicPartition(n, i) for n, ps in wanted for i in ps]
        # as the client form: a partition that does not exist fails the transaction's request, the others are
        # OPERATION_NOT_ATTEMPTED
        unknown = {tp for tp in tps if not 0 <= tp.partition < s.partitions(tp.topic)}
        try:
            if unknown:
                codes = {tp: UnknownTopicOrPartitionError.code if tp in unknown else
                         OperationNotAttemptedError.code for tp in tps}
            elif t["verify_only"]:
                codes = yield _off_loop(s, _verify_partitions, s, txn, pid, epoch, tps)
            else:
                yield s.txn_adds.call(txn, pid, epoch, tps, 2)
                codes = {}
        except KafkaError as e:
            code = error_code(e)
            _log_txn_refusal(ctx, "AddPartitionsToTxn", txn, e)
            codes = {tp: code for tp in tps}
        results.append({"transactional_id": txn, "topic_results": [
            {"name": n, "results_by_partition": [
                {"partition_index": i, "partition_error_code": codes.get(TopicPartition(n, i), 0)} for i in ps]}
            for n, ps in wanted]})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0,
                            "results_by_transaction": results})


def _verify_partitions(s: Services, txn: str, pid: int, epoch: int, tps) -> dict:
    with s.txn.locked():
        meta = s.txn.describe(txn)
        if meta is None or meta.producer_id != pid:
            raise InvalidProducerIdMappingError(f"transactional id {txn!r} is not held by producer {pid}")
        if meta.epoch != epoch:
            raise ProducerFencedError(f"producer {pid} epoch {epoch} was fenced by epoch {meta.epoch}")
        if meta.state_name in ("PrepareCommit", "PrepareAbort"):
            raise ConcurrentTransactionsError(f"transactional id {txn!r}: the last transaction is completing")
        ongoing = meta.state_name == "Ongoing"
        # TRANSACTION_ABORTABLE (120) for a partition not in the transaction, v4 included (Kafka 4.4's answer; the
        # leader maps it to what the producer's version knows)
        return {tp: 0 if ongoing and tp in meta.partitions else 120 for tp in tps}


def add_offsets_to_txn(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    txn = req["transactional_id"]
    if not_allowed(s, ctx, "WRITE", "TRANSACTIONAL_ID", txn):
        code = security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID"]
    elif not_allowed(s, ctx, "READ", "GROUP", req["group_id"]):
        code = GROUP_DENIED
    else:
        try:
            yield s.txn_adds.call(txn, req["producer_id"], req["producer_epoch"],
                                  [s.txn.offsets_partition(req["group_id"])], 0)
            code = 0
        except KafkaError as e:
            code = _txn_code(e, header.api_version, 2)
            _log_txn_refusal(ctx, "AddOffsetsToTxn", txn, e)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": code})


def end_txn(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    txn = req["transactional_id"]
    pid = epoch = -1
    if not_allowed(s, ctx, "WRITE", "TRANSACTIONAL_ID", txn):
        code = security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID"]
    else:
        try:
            # v5: transactions v2 (KIP-890 part 2), the epoch bumped at every end; the answer names the producer id
            # and epoch the producer goes on with
            pid, epoch = yield s.txn_ends.call(txn, req["producer_id"], req["producer_epoch"],
                                               bool(req["committed"]), 2 if header.api_version >= 5 else 0)
            code = 0
        except KafkaError as e:
            code, pid, epoch = _txn_code(e, header.api_version, 2), -1, -1
            _log_txn_refusal(ctx, "EndTxn", txn, e)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": code, "producer_id": pid,
                            "producer_epoch": epoch})


def txn_offset_commit(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    txn, group = req["transactional_id"], req["group_id"]
    code = 0
    if not_allowed(s, ctx, "WRITE", "TRANSACTIONAL_ID", txn):
        code = security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID"]
    elif not_allowed(s, ctx, "READ", "GROUP", group):
        code = GROUP_DENIED
    else:
        if header.api_version >= 5:
            # transactions v2: the group's offsets partition is added to the transaction here (the implicit
            # AddOffsetsToTxn), answered as a leader passes on the coordinator's answer
            wanted = {(req["producer_id"], req["producer_epoch"]): [s.txn.offsets_partition(group)]}
            refused = yield _off_loop(s, _add_implicitly, s, txn, wanted)
            code = next(iter(refused.values()), 0)
            if code == NOT_ENOUGH_REPLICAS:
                code = 14  # COORDINATOR_LOAD_IN_PROGRESS: retriable, and one of TxnOffsetCommit's codes
        else:
            try:
                yield _off_loop(s, s.txn.check_offsets, txn, req["producer_id"], req["producer_epoch"], group)
            except KafkaError as e:
                code = _txn_code(e, header.api_version, 3)
                _log_txn_refusal(ctx, "TxnOffsetCommit", txn, e)
        member, generation = req.get("member_id") or "", req.get("generation_id", -1)
        if not code and (member or generation >= 0):  # KIP-447: a group member's commit is fenced by generation
            code = s.groups.check_commit(group, member, generation, req.get("group_instance_id"))
    per_partition = code if callable(code) else None  # a KIP-848 member at an older epoch: checked per partition
    if per_partition is not None:
        code = 0
    topics, offsets = [], {}
    by_id = None
    if header.api_version >= 6:  # KIP-1319: topics by id (an id no topic has: UNKNOWN_TOPIC_ID)
        by_id = s.store.topics_by_id()
        if any(t["topic_id"] not in by_id for t in req["topics"]):
            by_id = yield s.loop.run_in_executor(None, _topics_by_id, s)
    for t in req["topics"]:
        name = t["name"] if by_id is None else by_id.get(t["topic_id"])
        if name is None:
            topics.append({"topic_id": t["topic_id"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code or UnknownTopicIdError.code}
                for p in t["partitions"]]})
            continue
        topic_code = code or (TOPIC_DENIED if not_allowed(s, ctx, "READ", "TOPIC", name) else 0)
        n = s.partitions(name) if not topic_code else 0
        parts = []
        for p in t["partitions"]:
            idx = p["partition_index"]
            pc = topic_code
            if not pc and not 0 <= idx < n:
                pc = UnknownTopicOrPartitionError.code
            elif not pc and per_partition is not None:
                pc = per_partition(name, idx)
            if not pc:
                try:
                    offsets[TopicPartition(name, idx)] = s.store.offsets.check_offset(
                        OffsetAndMetadata(p["committed_offset"], p.get("committed_metadata") or "", None),
                        name, idx, any_offset=True)
                except KafkaError as e:
                    pc = error_code(e)
            parts.append({"partition_index": idx, "error_code": pc})
        topics.append({"name": name, "topic_id": t.get("topic_id"), "partitions": parts})
    if offsets:
        try:
            yield _off_loop(s, s.store.offsets.commit_transactional, group, offsets, req["producer_id"],
                            req["producer_epoch"])
        except KafkaError as e:
            for t in topics:
                for p in t["partitions"]:
                    if TopicPartition(t.get("name"), p["partition_index"]) in offsets:
                        p["error_code"] = error_code(e)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": topics})


def write_txn_markers(s: Services, ctx, header, frame, offset):
    """Markers written at the request of another node or of the admin client (Admin.abortTransaction, what
    ``kafka-transactions abort`` sends for a hanging transaction): each appended and fsynced on its partition, with
    the partition's epoch check (INVALID_PRODUCER_EPOCH for a fenced epoch). CLUSTER_ACTION on the cluster."""
    req = request_body(ctx, header, frame, offset)
    denied = not_allowed(s, ctx, "CLUSTER_ACTION", "CLUSTER", security.CLUSTER_NAME)
    out = []
    for m in req["markers"]:
        topics = []
        for t in m["topics"]:
            name = t["name"]
            n = s.partitions(name)
            parts = []
            for idx in t["partition_indexes"]:
                code = CLUSTER_DENIED if denied else 0
                if not code and not 0 <= idx < n:
                    code = UnknownTopicOrPartitionError.code
                elif not code:
                    try:
                        lg = s.log(name, idx)
                        yield _off_loop(s, _append_marker_durably, lg, m["producer_id"], m["producer_epoch"],
                                        bool(m["transaction_result"]), m["coordinator_epoch"])
                        log.info("%s wrote a %s marker for producer %d epoch %d on %s-%d", ctx.peer,
                                 "COMMIT" if m["transaction_result"] else "ABORT", m["producer_id"],
                                 m["producer_epoch"], name, idx)
                    except KafkaError as e:
                        code = error_code(e)
                parts.append({"partition_index": idx, "error_code": code})
            topics.append({"name": name, "partitions": parts})
        out.append({"producer_id": m["producer_id"], "topics": topics})
    return respond(header, {"markers": out})


def _append_marker_durably(lg, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> None:
    lg.append_marker(pid, epoch, commit, coordinator_epoch)
    lg.flush()


def describe_transactions(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    for txn in req["transactional_ids"]:
        entry = {"error_code": 0, "transactional_id": txn, "transaction_state": "", "transaction_timeout_ms": 0,
                 "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}
        meta = s.txn.describe(txn) if txn else None
        if not txn:
            entry["error_code"] = InvalidRequestError.code
        elif not_allowed(s, ctx, "DESCRIBE", "TRANSACTIONAL_ID", txn):
            entry["error_code"] = security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID"]
        elif meta is None:
            entry["error_code"] = TransactionalIdNotFoundError.code
        else:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(meta.partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            entry.update(transaction_state=meta.state_name, transaction_timeout_ms=meta.timeout_ms,
                         transaction_start_time_ms=meta.start_ms, producer_id=meta.producer_id,
                         producer_epoch=meta.epoch,
                         topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        out.append(entry)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "transaction_states": out})


def list_transactions(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
             "PrepareEpochFence"}
    states = set(req["state_filters"])
    pids = set(req["producer_id_filters"])
    duration = req.get("duration_filter", -1)
    pattern = req.get("transactional_id_pattern")
    try:
        rx = re.compile(pattern) if pattern else None
    except re.error:
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": InvalidRequestError.code,
                              "unknown_state_filters": [], "transaction_states": []})
    now = int(time.time() * 1000)
    out = []
    for meta in sorted(s.txn.all(), key=lambda m: m.txn_id):
        if (states and meta.state_name not in states) or (pids and meta.producer_id not in pids):
            continue
        if duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms < duration):
            continue
        if rx is not None and not rx.fullmatch(meta.txn_id):
            continue
        if not allowed(s, ctx, "DESCRIBE", "TRANSACTIONAL_ID", meta.txn_id):
            continue
        out.append({"transactional_id": meta.txn_id, "producer_id": meta.producer_id,
                    "transaction_state": meta.state_name})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0,
                          "unknown_state_filters": sorted(states - known), "transaction_states": out})


def describe_producers(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    topics = []
    for t in req["topics"]:
        name = t["name"]
        denied = not_allowed(s, ctx, "READ", "TOPIC", name)
        n = s.partitions(name) if not denied else 0
        parts = []
        for idx in t["partition_indexes"]:
            r = {"partition_index": idx, "error_code": 0, "error_message": None, "active_producers": []}
            if denied:
                r["error_code"] = TOPIC_DENIED
            elif not 0 <= idx < n:
                r["error_code"] = UnknownTopicOrPartitionError.code
            else:
                try:
                    lg = s.log(name, idx)
                    # Kafka's producer state: the coordinator epoch is the one of the producer's last marker on the
                    # partition (-1 before any), the start offset the one of its open transaction
                    txns = lg.transactional_producers()
                    idem = s.producers.active(name, idx, lg)
                    for pid in sorted(set(idem) | set(txns)):
                        epoch, last_seq, last_ts = idem.get(pid, (-1, -1, -1))
                        t_epoch, coord_epoch, first = txns.get(pid, (-1, -1, -1))
                        r["active_producers"].append({
                            "producer_id": pid, "producer_epoch": max(epoch, t_epoch), "last_sequence": last_seq,
                            "last_timestamp": last_ts, "coordinator_epoch": coord_epoch,
                            "current_txn_start_offset": first})
                except KafkaError as e:
                    r["error_code"] = error_code(e)
                    r["error_message"] = str(e)
            parts.append(r)
        topics.append({"name": name, "partitions": parts})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": topics})


# ---------------------------------------------------------------------------------------------------- groups

# Kafka's default texts of the errors FindCoordinator answers (Errors.message(): what v1-3's ErrorMessage and a v4+
# whole-request error carry; a v4+ per-key error carries "", the generated default)
_ERROR_TEXT = {
    0: "NONE",
    30: "Group authorization failed.",
    31: "Cluster authorization failed.",
    42: "This most likely occurs because of a request being malformed by the client library or the message was sent "
        "to an incompatible broker. See the broker logs for more details.",
    53: "Transactional Id authorization failed.",
}
_GROUP_KEY, _TXN_KEY, _SHARE_KEY = 0, 1, 2


def _coordinator_error(s: Services, ctx, key_type: int, key: str, version: int) -> int:
    """Kafka's KafkaApis.getCoordinator for one key: 0 (this node) or the key's error code."""
    if key_type == _GROUP_KEY:
        return GROUP_DENIED if not_allowed(s, ctx, "DESCRIBE", "GROUP", key) else 0
    if key_type == _TXN_KEY:
        return security.DENIAL_ERROR_CODE["TRANSACTIONAL_ID"] \
            if not_allowed(s, ctx, "DESCRIBE", "TRANSACTIONAL_ID", key) else 0
    # a share-group state key (KIP-932, v6+, "groupId:topicId:partition", asked by brokers' share-group persisters),
    # after the CLUSTER_ACTION check (a denial fails the whole request): with share groups on (share.version >= 1)
    # this node keeps every share-partition's state, as it coordinates every group; a key that is not one, or share
    # groups off, is INVALID_REQUEST (Kafka's answer from a broker without a share coordinator)
    if version >= 6 and not_allowed(s, ctx, "CLUSTER_ACTION", "CLUSTER", security.CLUSTER_NAME):
        raise ClusterAuthorizationFailedError("CLUSTER_ACTION is needed to find a share coordinator")
    if version >= 6 and s.features.levels["share.version"] >= 1 and _share_key_ok(key):
        return 0
    return InvalidRequestError.code


def _share_key_ok(key: str) -> bool:
    """Kafka's SharePartitionKey.validate: "groupId:topicId:partition", a base64 topic id, an int partition."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return False
    try:
        _topic_uuid(parts[1])
        int(parts[2])
    except (ValueError, TypeError):
        return False
    return len(parts[1]) == 22


def find_coordinator(s: Services, ctx, header, frame, offset):
    """FindCoordinator: this node coordinates every group and transactional id. v4+ (KIP-699) batches keys, each
    answered on its own (an ACL denial is that key's error)."""
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    key_type = req["key_type"]
    keys = req["coordinator_keys"] if v >= 4 else [req["key"]]
    try:
        if key_type not in (_GROUP_KEY, _TXN_KEY, _SHARE_KEY):
            raise InvalidRequestError(f"unknown coordinator key type {key_type}")
        codes = [_coordinator_error(s, ctx, key_type, key, v) for key in keys]
        per_key_text = ""
    except KafkaError as e:  # Kafka fails the whole request: every key gets the code and its default text
        codes = [error_code(e)] * len(keys)
        per_key_text = None

    def where(code):
        return (s.node_id, s.host, s.port) if code == 0 else (-1, "", -1)
    if v < 4:
        code = codes[0]
        node_id, host, port = where(code)
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": code,
                                "error_message": _ERROR_TEXT.get(code), "node_id": node_id, "host": host,
                                "port": port})
    out = []
    for key, code in zip(keys, codes):
        node_id, host, port = where(code)
        out.append({"key": key, "node_id": node_id, "host": host, "port": port, "error_code": code,
                    "error_message": _ERROR_TEXT.get(code) if per_key_text is None else per_key_text})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "coordinators": out})


def join_group(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if not_allowed(s, ctx, "READ", "GROUP", req["group_id"]):
        return s.groups._join_error(header, GROUP_DENIED, req["member_id"] or "")
    return s.groups.join(ctx, header, req)


def sync_group(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if not_allowed(s, ctx, "READ", "GROUP", req["group_id"]):
        return s.groups._sync_answer(header, GROUP_DENIED, b"")
    return s.groups.sync(ctx, header, req)


def heartbeat(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if not_allowed(s, ctx, "READ", "GROUP", req["group_id"]):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": GROUP_DENIED})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": s.groups.heartbeat(
        req["group_id"], req["member_id"], req["generation_id"], req.get("group_instance_id"))})


def leave_group(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if not_allowed(s, ctx, "READ", "GROUP", req["group_id"]):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": GROUP_DENIED, "members": []})
    # v3+ (KIP-345): a batch of members, each by member id or by a static member's instance id, each answered
    asked = [{"member_id": req["member_id"]}] if header.api_version < 3 else req["members"]
    codes, written = s.groups.leave(req["group_id"], asked)
    members = [{"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"), "error_code": code}
               for m, code in zip(asked, codes)]
    top = 0
    if written is not None:  # a KIP-848 consumer group's: answered once the removals are durable
        try:
            yield written
        except Exception as e:  # noqa: BLE001  (the group is back as it was: Kafka's mapping of a failed append)
            log.error("LeaveGroup of group %s: %s", req["group_id"], e)
            top = write_error_code(e)
    if header.api_version < 3:
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms,
                                "error_code": top or members[0]["error_code"]})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": top,
                            "members": [] if top else members})


def offset_commit(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    group = req["group_id"]
    generation = req.get("generation_id_or_member_epoch", req.get("generation_id", -1))
    # Kafka's order: the group's ACL first (every partition answered GROUP_AUTHORIZATION_FAILED), then each topic's
    # ACL and existence (a topic or partition it does not have is answered so, whatever the group's state), then
    # the group's check of the member for the partitions left
    group_denied = not_allowed(s, ctx, "READ", "GROUP", group)
    err = 0 if group_denied else \
        s.groups.check_commit(group, req["member_id"], generation, req.get("group_instance_id"), header.api_version)
    topics = []  # each with its name: a v10 answer carries the id alone
    offsets = {}
    sl = Slice()
    by_id = None
    if header.api_version >= 10:  # KIP-848: topics by id
        by_id = s.store.topics_by_id()
        if any(t["topic_id"] not in by_id for t in req["topics"]):
            by_id = yield s.loop.run_in_executor(None, _topics_by_id, s)  # a registry read: off the loop
    for t in req["topics"]:
        parts = []
        if by_id is None:
            name, topic_code = t["name"], 0
        else:  # v10 names topics by id (KIP-848): an id no topic has is UNKNOWN_TOPIC_ID
            name = by_id.get(t["topic_id"])
            topic_code = UnknownTopicIdError.code if name is None else 0
        if group_denied:
            topic_code = GROUP_DENIED
        elif not topic_code and not_allowed(s, ctx, "READ", "TOPIC", name):
            topic_code = TOPIC_DENIED
        n = s.partitions(name) if not topic_code else 0
        for p in t["partitions"]:
            if sl.due():
                yield
            idx = p["partition_index"]
            code = topic_code
            if not code and not 0 <= idx < n:
                code = UnknownTopicOrPartitionError.code  # Kafka's answer for a partition it does not have
            code = code or (err(name, idx) if callable(err) else err)
            if not code:
                try:
                    # Kafka stores any int64 offset (KafkaJS commits -1/-2 to reset a group); the metadata is
                    # bounded by offset.metadata.max.bytes (OFFSET_METADATA_TOO_LARGE)
                    offsets[TopicPartition(name, idx)] = s.store.offsets.check_offset(
                        OffsetAndMetadata(p["committed_offset"], p.get("committed_metadata") or "", None),
                        name, idx, any_offset=True)
                except KafkaError as e:
                    code = error_code(e)
            parts.append({"partition_index": idx, "error_code": code})
        topics.append({"name": name, "topic_id": t.get("topic_id"), "partitions": parts})
    if offsets:
        try:
            # appended and fsynced by a worker thread: the loop serves others meanwhile
            yield s.loop.run_in_executor(None, functools.partial(s.store.offsets.commit, group, offsets,
                                                                 any_offset=True))
        except (KafkaError, OSError) as e:
            # nothing of a failed commit is in the group's offsets; a storage error is Kafka's NOT_COORDINATOR
            # (its coordinator maps KAFKA_STORAGE_ERROR so), so the client finds the coordinator and commits again
            code = NotCoordinatorError.code if isinstance(e, OSError) else error_code(e)
            for t in topics:
                for p in t["partitions"]:
                    if TopicPartition(t["name"], p["partition_index"]) in offsets:
                        p["error_code"] = code
    return (yield from answer_sliced(s, sl, header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": topics}))


def offset_fetch(s: Services, ctx, header, frame, offset):
    """OffsetFetch: v1-7 one group; v8+ a batch of groups, each answered on its own (KIP-709); v9+'s member id and
    epoch belong to KIP-848 consumer groups, and a classic group's fetch ignores them (Kafka 4.4's answer, checked
    in the lab); v10 names topics by id (UNKNOWN_TOPIC_ID for an id no topic has)."""
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    stable = bool(req.get("require_stable"))
    sl = Slice()
    if v < 8:
        code, topics = yield from _group_offsets(s, ctx, req["group_id"], req["topics"], stable, v, sl)
        return (yield from answer_sliced(s, sl, header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": topics,
                                                         "error_code": code}))
    by_id = None
    if v >= 10 and any(g["topics"] for g in req["groups"]):
        by_id = yield s.loop.run_in_executor(None, _topics_by_id, s)  # ids to names (a registry read): off the loop
    groups = []
    for g in req["groups"]:
        code, topics = yield from _group_offsets(s, ctx, g["group_id"], g["topics"], stable, v, sl, by_id,
                                                 g.get("member_id"), g.get("member_epoch", -1))
        groups.append({"group_id": g["group_id"], "topics": topics, "error_code": code})
    return (yield from answer_sliced(s, sl, header, {"throttle_time_ms": ctx.throttle_time_ms, "groups": groups}))


def _no_offset(idx: int, code: int) -> dict:
    return {"partition_index": idx, "committed_offset": -1, "metadata": "", "error_code": code}


def _group_offsets(s: Services, ctx, group: str, wanted, stable: bool, v: int, sl: Slice, by_id=None,
                   member_id: str | None = None, member_epoch: int = -1):
    """One group's committed offsets → (group error code, topics); ``wanted`` None = every committed partition the
    principal may describe. From v10 topics are named by id: ``by_id`` maps ids to names."""
    by_ids = v >= 10
    key = "topic_id" if by_ids else "name"
    if not_allowed(s, ctx, "DESCRIBE", "GROUP", group):
        if v >= 8:  # a batch: the group's error alone
            return GROUP_DENIED, []
        return GROUP_DENIED, [{"name": t["name"], "partitions": [_no_offset(i, GROUP_DENIED)
                                                                  for i in t["partition_indexes"]]}
                              for t in wanted or ()]
    member_code = s.groups.check_fetch(group, member_id, member_epoch)  # v9+ (KIP-848 consumer groups)
    if member_code:
        return member_code, []
    committed = s.store.offsets.committed_all(group)
    # KIP-447: a read_committed consumer must not start from an offset a transaction may still replace
    unstable = s.store.offsets.pending(group) if stable else ()
    if wanted is None:
        pairs = sorted(tp for tp in committed if allowed(s, ctx, "DESCRIBE", "TOPIC", tp.topic))
        names: dict[str, list[int]] = {}
        for tp in pairs:
            names.setdefault(tp.topic, []).append(tp.partition)
        wanted = []
        for name, parts in names.items():
            if by_ids:
                tid = s.store.cached_topic_id(name)
                if tid is None:  # no such topic any more (or one of an older kafkalog, not asked for yet): no id
                    continue
                wanted.append({"topic_id": _topic_uuid(tid), "name": name, "partition_indexes": parts})
            else:
                wanted.append({"name": name, "partition_indexes": parts})
    elif by_ids:
        wanted = [dict(t, name=by_id.get(t["topic_id"])) for t in wanted]
    topics = []
    # v8+: the topics answered with an error follow the others (Kafka appends its error answers to the group's)
    failed = [] if v >= 8 else topics
    for t in wanted:
        if sl.due():
            yield
        name = t["name"]
        if name is None:  # v10: an id no topic has
            failed.append({key: t[key], "partitions": [_no_offset(i, UnknownTopicIdError.code)
                                                       for i in t["partition_indexes"]]})
            continue
        if not_allowed(s, ctx, "DESCRIBE", "TOPIC", name):
            failed.append({key: t[key], "partitions": [_no_offset(i, TOPIC_DENIED) for i in t["partition_indexes"]]})
            continue
        parts = []
        for idx in t["partition_indexes"]:
            if sl.due():
                yield
            tp = TopicPartition(name, idx)
            if tp in unstable:
                parts.append(_no_offset(idx, UnstableOffsetCommitError.code))
                continue
            om = committed.get(tp)
            parts.append({"partition_index": idx, "committed_offset": om.offset if om else -1,
                          "metadata": (om.metadata if om else "") or "", "error_code": 0})
        topics.append({key: t[key], "partitions": parts})
    if failed is not topics:
        topics += failed
    return 0, topics


def consumer_group_heartbeat(s: Services, ctx, header, frame, offset):
    """KIP-848's heartbeat (consumer_groups.py): join, reconcile, leave."""
    req = request_body(ctx, header, frame, offset)
    if s.features.levels["group.version"] < 1:  # KIP-848 off (kafka-features downgrade): Kafka's answer
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": UnsupportedVersionError.code,
                                "error_message": None, "member_id": None, "member_epoch": 0,
                                "heartbeat_interval_ms": 0, "assignment": None})
    if not_allowed(s, ctx, "READ", "GROUP", req["group_id"]):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": GROUP_DENIED,
                                "error_message": None, "member_id": None, "member_epoch": 0,
                                "heartbeat_interval_ms": 0, "assignment": None})
    denied = [t for t in req["subscribed_topic_names"] or () if not_allowed(s, ctx, "DESCRIBE", "TOPIC", t)]
    if denied:
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": TOPIC_DENIED,
                                "error_message": "The member is not authorized to access topics: "
                                                 f"[{', '.join(sorted(denied))}].", "member_id": None,
                                "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None})
    body, written = s.groups.consumer.heartbeat(ctx, header, req)
    if written is not None:  # answered once the group's records are durable, as Kafka answers once committed
        try:
            yield written
        except Exception as e:  # noqa: BLE001  (a failed write: the group is back as before; the client retries)
            log.error("ConsumerGroupHeartbeat of group %s: %s", req["group_id"], e)
            body = s.groups.consumer.write_failed(body, e)
    return respond(header, body)


def consumer_group_describe(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    names = None
    out = []
    for gid in req["group_ids"]:
        r = {"error_code": 0, "error_message": None, "group_id": gid, "group_state": "", "group_epoch": 0,
             "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": -2**31}
        if not_allowed(s, ctx, "DESCRIBE", "GROUP", gid):
            r["error_code"] = GROUP_DENIED
        elif not gid:
            r["error_code"] = InvalidGroupIdError.code
        elif gid not in s.groups.consumer.groups:
            known = s.groups.classic_has_members(gid) or gid in s.store.offsets.groups()
            r.update(error_code=GroupIdNotFoundError.code,
                     error_message=f"Group {gid} is not a consumer group." if known else f"Group {gid} not found.")
        else:
            if names is None:
                names = yield s.loop.run_in_executor(None, _topics_by_id, s)
            r.update(s.groups.consumer.describe(gid, names))
            if req["include_authorized_operations"]:
                r["authorized_operations"] = _admin._operations(s, ctx, "GROUP", gid, _admin.GROUP_OPERATIONS)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "groups": out})


# ---------------------------------------------------------------------------------------------------- quotas

def describe_client_quotas(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if not_allowed(s, ctx, "DESCRIBE_CONFIGS", "CLUSTER", security.CLUSTER_NAME):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": CLUSTER_DENIED,
                              "error_message": f"{ctx.principal} may not describe quotas", "entries": None})
    want_default = want_any = False
    want_name = None
    for c in req["components"]:
        if c["entity_type"] != "client-id":
            return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": InvalidRequestError.code,
                                  "error_message": f"kafkalog quotas are per client-id, not {c['entity_type']!r}",
                                  "entries": None})
        if c["match_type"] == 0:
            want_name = c["match"]
        elif c["match_type"] == 1:
            want_default = True
        else:
            want_any = True
    match_all = not req["components"]
    entries: dict = {}
    for cid, kind, rate in s.quotas.describe():
        if not (match_all or want_any or (cid is None and want_default) or (cid is not None and cid == want_name)):
            continue
        entries.setdefault(cid, []).append({"key": kind, "value": float(rate)})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": "",
                          "entries": [{"entity": [{"entity_type": "client-id", "entity_name": cid}], "values": vals}
                                      for cid, vals in entries.items()]})


def alter_client_quotas(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    may_alter = not not_allowed(s, ctx, "ALTER_CONFIGS", "CLUSTER", security.CLUSTER_NAME)
    for e in req["entries"]:
        r = {"error_code": 0, "error_message": None, "entity": e["entity"]}
        if not may_alter:
            r["error_code"] = CLUSTER_DENIED
            r["error_message"] = f"{ctx.principal} may not alter quotas"
            out.append(r)
            continue
        try:
            if len(e["entity"]) != 1 or e["entity"][0]["entity_type"] != "client-id":
                raise InvalidRequestError("kafkalog quotas are per client-id: give exactly one client-id entity")
            cid = e["entity"][0]["entity_name"]
            for op in e["ops"]:
                if op["key"] not in (PRODUCE_QUOTA, FETCH_QUOTA):
                    raise InvalidRequestError(f"quota key {op['key']!r} is not supported (only {PRODUCE_QUOTA}, "
                                              f"{FETCH_QUOTA})")
                if not op["remove"] and not op["value"] > 0:
                    raise InvalidRequestError(f"{op['key']}={op['value']}: must be a positive rate")
            if not req["validate_only"]:
                for op in e["ops"]:
                    s.quotas.set_quota(op["key"], cid, None if op["remove"] else op["value"])
                    log.info("quota %s for client id %s set to %s by %s", op["key"],
                             "<default>" if cid is None else repr(cid), "none" if op["remove"] else op["value"],
                             ctx.peer)
        except KafkaError as err:
            r["error_code"] = error_code(err)
            r["error_message"] = str(err)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "entries": out})


# ---------------------------------------------------------------------------------------------------- SASL

def sasl_handshake(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    conn = ctx.connection
    mech = req["mechanism"]
    if not s.broker.sasl or conn.authenticated:
        code = security.IllegalSaslStateError.code
    elif mech not in s.mechanisms:
        code = security.UnsupportedSaslMechanismError.code
        log.warning("SASL handshake from %s: mechanism %r is not enabled (enabled: %s)", ctx.peer, mech,
                    ", ".join(s.mechanisms))
    else:
        code = 0
        conn.sasl_server = security.SaslServer(mech, s.credentials)
        conn.sasl_raw = header.api_version == 0  # v0: the tokens follow as bare frames (no SaslAuthenticate)
    return respond(header, {"error_code": code, "mechanisms": s.mechanisms})


def sasl_authenticate(s: Services, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    conn = ctx.connection
    if conn.sasl_server is None or conn.authenticated:
        return respond(header, {"error_code": security.IllegalSaslStateError.code,
                              "error_message": "SaslAuthenticate without a SaslHandshake", "auth_bytes": b"",
                              "session_lifetime_ms": 0})
    return _sasl_step(s, ctx, bytes(req["auth_bytes"] or b""), header)


async def _sasl_step(s, ctx, token: bytes, header):
    conn = ctx.connection
    server = conn.sasl_server
    try:
        # PLAIN derives the SCRAM key of the password (PBKDF2, milliseconds): off the loop
        reply = await s.loop.run_in_executor(None, server.step, token)
    except KafkaError as e:
        log.warning("SASL/%s authentication from %s failed: %s", server.mechanism, ctx.peer, e)
        conn.sasl_server = None
        conn.close_after_response = True  # Kafka closes after answering a failed authentication
        if header is None:
            return None
        return respond(header, {"error_code": error_code(e), "error_message": str(e), "auth_bytes": b"",
                              "session_lifetime_ms": 0})
    if server.complete:
        conn.authenticated = True
        conn.sasl_raw = False
        ctx.principal = server.principal
        log.info("%s authenticated as %s (SASL/%s)", ctx.peer, server.principal, server.mechanism)
    if header is None:  # SaslHandshake v0: a bare token answers a bare token
        return [struct.pack(">i", len(reply)) + reply]
    return respond(header, {"error_code": 0, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": 0})


def sasl_raw_token(s: Services, conn, frame):
    return _sasl_step(s, conn.ctx, bytes(frame), None)


API_HANDLERS = {
    0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit, 9: offset_fetch, 10: find_coordinator,
    11: join_group, 12: heartbeat, 13: leave_group, 14: sync_group, 17: sasl_handshake, 18: api_versions,
    19: create_topics, 20: delete_topics, 21: delete_records, 22: init_producer_id, 23: offset_for_leader_epoch,
    24: add_partitions_to_txn,
    25: add_offsets_to_txn, 26: end_txn, 27: write_txn_markers, 28: txn_offset_commit, 36: sasl_authenticate,
    48: describe_client_quotas, 49: alter_client_quotas, 61: describe_producers, 65: describe_transactions,
    66: list_transactions, 68: consumer_group_heartbeat, 69: consumer_group_describe, 57: update_features,
}

API_HANDLERS.update(_admin.HANDLERS)
ADVERTISED.update(_admin.VERSIONS)
API_HANDLERS.update(_SHARE_HANDLERS)
ADVERTISED.update(_SHARE_VERSIONS)

__all__ = ["ADVERTISED", "API_HANDLERS", "RequestContext", "Services"]
