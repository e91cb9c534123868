"""Incremental fetch sessions (KIP-227): the broker's ``FetchSessionCache`` and the per-request ``FetchContext``.

What the session fields of a FetchRequest v7+ mean (``FetchMetadata``)::

    FetchRequest  => ... session_id => INT32  session_epoch => INT32  [topics] [forgotten_topics_data]
    session_id  session_epoch  meaning
    0           -1             full fetch, no session (every pre-v7 request; librdkafka, aiokafka, kcat)
    0            0             full fetch; create a session if the cache has (or can free) a slot
    ID          -1             close session ID; full fetch, no new session
    ID           0             close session ID; full fetch; create a new session if possible
    ID           E >= 1        incremental fetch of session ID if E is the epoch it expects; unknown ID =>
                               FETCH_SESSION_ID_NOT_FOUND (70), another E => INVALID_FETCH_SESSION_EPOCH (71), a
                               request on the other side of v13 than the one that made the session =>
                               FETCH_SESSION_TOPIC_ID_ERROR (106)

    FetchResponse => throttle_time_ms => INT32  error_code => INT16  session_id => INT32  [responses]
    error_code 70/71/106: no partitions, session_id 0 (a 71 found only when the response is built, because a duplicate
    request overtook this one, carries the session's id, as Kafka's does).  session_id 0: no session (the next
    request is a full one);
    session_id ID: the next request may be incremental with epoch 1 (then 2, ...; after 2147483647 comes 1, never 0).

An incremental request lists only the partitions it adds or whose fetch offset / log start offset / max bytes changed,
and ``forgotten_topics_data`` for the ones it drops; every other partition of the session is read as cached. An
incremental response carries only the partitions with records, a changed high watermark or log start offset, or an
error. Per partition the session keeps what the seed lists: topic, partition, max bytes, fetch offset and the
fetcher's log start offset (from the latest request naming it), high watermark and local log start offset (from the
latest response). Partitions that returned records move to the end of the session's order, so under a response size
limit every partition gets its turn (no starvation of the ones at the end).

Topic ids (KIP-516): from v13 a request names topics by id, and a session made by a v13+ request keys its partitions
by (topic id, partition), one made before v13 by (topic name, partition); a session is continued only by requests on
its side of v13 (Kafka's ``usesTopicIds``). Here a partition's "topic" is whichever key its session uses (a str name or
a uuid.UUID id); ids are resolved to names through the ``names`` map the caller passes, and a partition whose id
resolved to no topic keeps ``name`` None (answered UNKNOWN_TOPIC_ID by the caller) until a later request of its
session finds the id (a topic created meanwhile), as Kafka's ``maybeResolveUnknownName``; once resolved, a name stays.

The cache follows Kafka's ``FetchSession.scala``: ``max.incremental.fetch.session.cache.slots`` split over 8 shards
used round-robin, each owning a disjoint range of session ids (random, positive, never 0); when a shard is full a
newcomer evicts (1) its least recently used session if idle more than 120 s, else (2) its least valuable evictable
session by (privileged, partition count, id), if the newcomer's (privileged, partition count, 0) is not smaller.
A consumer session is evictable by anyone 120 s after its creation and by a follower at any time; a follower's only
after 120 s. Two differences, both keeping the seed's intent: "evictable" is judged at eviction time (Kafka judges it
when the session was last used, so an active session older than 120 s can escape rule 3 there), and the slots are
divided so that they add up (Kafka's slots/8 per shard loses the remainder, and with fewer than 8 slots all of them:
here fewer slots make fewer shards).
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from ..errors import FetchSessionIdNotFoundError, FetchSessionTopicIdError, InvalidFetchSessionEpochError

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
NUM_SHARDS = 8  # Kafka's NumFetchSessionCacheShards
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS (hard-coded there too)
DEFAULT_SLOTS = 1000  # max.incremental.fetch.session.cache.slots

_NOT_FOUND = FetchSessionIdNotFoundError.code
_BAD_EPOCH = InvalidFetchSessionEpochError.code
_TOPIC_ID_USE = FetchSessionTopicIdError.code
TOPIC_IDS_FROM = 13  # the first Fetch version that names topics by id

TP = tuple[object, int]  # (topic name, or topic id from v13, partition)


def next_epoch(epoch: int) -> int:
    """The epoch a session expects after ``epoch``: -1 stays -1, 2147483647 wraps to 1 (never 0)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= INT32_MAX else epoch + 1


class PartitionResult(NamedTuple):
    """What the broker read for one partition; ``records`` (a buffer, a list of buffers or None) is passed through
    untouched, ``records_size`` is its length in bytes."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: object
    records_size: int
    aborted: object = None  # read_committed: [(producer id, first offset)] of aborted transactions in ``records``


class CachedPartition:
    """One partition of a session: the request side (``max_bytes``, ``fetch_offset``, ``fetcher_log_start_offset``)
    and what was last sent of the response side (``high_watermark``, ``local_log_start_offset``); ``name`` is its
    topic's name (None: a topic id no topic has, yet)."""

    __slots__ = ("max_bytes", "fetch_offset", "fetcher_log_start_offset", "high_watermark", "local_log_start_offset",
                 "name")

    def __init__(self, fetch_offset: int, fetcher_log_start_offset: int, max_bytes: int,
                 high_watermark: int = -1, local_log_start_offset: int = -1, name: str | None = None):
        self.name = name
        self.fetch_offset = fetch_offset
        self.fetcher_log_start_offset = fetcher_log_start_offset
        self.max_bytes = max_bytes
        self.high_watermark = high_watermark
        self.local_log_start_offset = local_log_start_offset

    def must_respond(self, r: PartitionResult, update: bool) -> bool:
        """Whether ``r`` has to be in an incremental response; with ``update``, remember what is being sent."""
        respond = r.records_size > 0
        if self.high_watermark != r.high_watermark:
            respond = True
            if update:
                self.high_watermark = r.high_watermark
        if self.local_log_start_offset != r.log_start_offset:
            respond = True
            if update:
                self.local_log_start_offset = r.log_start_offset
        if r.error_code:
            # -1 is never a real high watermark: once the error clears, the partition is sent again
            respond = True
            if update:
                self.high_watermark = -1
        return respond

    def __repr__(self) -> str:
        return (f"CachedPartition(fetch_offset={self.fetch_offset}, max_bytes={self.max_bytes}, "
                f"high_watermark={self.high_watermark}, fetcher_log_start_offset={self.fetcher_log_start_offset}, "
                f"local_log_start_offset={self.local_log_start_offset})")


class FetchSession:
    """One incremental fetch session. ``partitions`` is in rotation order (dict insertion order); ``cached_size`` is
    the partition count the cache last accounted for (-1: not in a cache); ``uses_topic_ids``: made by a v13+ request,
    its partitions keyed by topic id."""

    __slots__ = ("id", "privileged", "partitions", "creation_ms", "last_used_ms", "epoch", "cached_size",
                 "uses_topic_ids")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[TP, CachedPartition], now_ms: int,
                 uses_topic_ids: bool = False):
        self.id = session_id
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged
        self.partitions = partitions
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1

    @property
    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data: Iterable[tuple[object, int, int, int, int]], forgotten: Iterable[TP],
               names=None) -> None:
        """Apply an incremental request: add or update the listed partitions (new ones go to the end), then drop
        the forgotten ones. ``names``: {topic id: name} when the session uses topic ids."""
        parts = self.partitions
        for topic, partition, fetch_offset, log_start_offset, max_bytes in fetch_data:
            cp = parts.get((topic, partition))
            if cp is None:
                parts[(topic, partition)] = CachedPartition(fetch_offset, log_start_offset, max_bytes,
                                                            name=_name_of(topic, names))
            else:
                cp.fetch_offset = fetch_offset
                cp.fetcher_log_start_offset = log_start_offset
                cp.max_bytes = max_bytes
        for tp in forgotten:
            parts.pop(tp, None)

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={len(self.partitions)}, "
                f"creation_ms={self.creation_ms}, last_used_ms={self.last_used_ms}, epoch={self.epoch})")


class FetchSessionCacheShard:
    """One shard of the cache: at most ``capacity`` sessions with ids in ``[id_low, id_high)``. Not thread-safe
    (the cache's owner serialises every call)."""

    def __init__(self, index: int, capacity: int, id_low: int, id_high: int, eviction_ms: int, rng: random.Random,
                 on_evict: Callable[[], None]):
        self.index = index
        self.capacity = capacity
        self.id_low = id_low
        self.id_high = id_high
        self.eviction_ms = eviction_ms
        self._rng = rng
        self._on_evict = on_evict
        self.sessions: dict[int, FetchSession] = {}
        self.num_partitions = 0

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def new_session_id(self) -> int:
        while True:
            sid = self._rng.randrange(self.id_low, self.id_high)
            if sid != INVALID_SESSION_ID and sid not in self.sessions:
                return sid

    def maybe_create_session(self, now_ms: int, privileged: bool, partitions: dict[TP, CachedPartition],
                             uses_topic_ids: bool = False) -> int:
        """The new session's id, or 0 when the shard is full and no session may be evicted for it."""
        if len(self.sessions) >= self.capacity and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self.new_session_id(), privileged, partitions, now_ms, uses_topic_ids)
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self._evict(lru)
            return True
        best = None
        best_key = None
        for s in self.sessions.values():
            aged = now_ms - s.creation_ms > self.eviction_ms
            # a follower may evict any consumer session; otherwise only sessions past their protected first 120 s
            if aged or (privileged and not s.privileged):
                key = s.evictable_key()
                if best_key is None or key < best_key:
                    best, best_key = s, key
        if best is None or (privileged, size, 0) < best_key:
            return False
        self._evict(best)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self._on_evict()

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None and session.cached_size >= 0:
            self.num_partitions -= session.cached_size
            session.cached_size = -1
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Mark ``session`` used at ``now_ms`` and re-account its partition count."""
        session.last_used_ms = now_ms
        if session.cached_size >= 0:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.num_partitions += session.cached_size

    def clear(self) -> None:
        for s in self.sessions.values():
            s.cached_size = -1
        self.sessions.clear()
        self.num_partitions = 0


# ------------------------------------------------------------------------------------------------------ contexts

class FetchContext:
    """What one Fetch request reads and how its response is built. Use it on the thread that created it.

    ``error_code`` is 0, 70, 71 or 106; when it is not 0 nothing is read and the response has no partitions (an
    incremental context whose session moved on in the meantime turns to 71 in ``build_response``)."""

    __slots__ = ("error_code",)
    incremental = False

    def __init__(self, error_code: int = 0):
        self.error_code = error_code

    def partitions_to_read(self) -> list[tuple[object, int, int, int, str | None]]:
        """(topic, partition, fetch_offset, partition_max_bytes, topic name or None) in the order the response
        budget is spent; topic is the name, or the topic id from v13 (then the name is None for an unknown id)."""
        return []

    def build_response(self, results: dict[TP, PartitionResult]) -> tuple[int, list[tuple[object, int,
                                                                                            PartitionResult]]]:
        """(session id for the response, [(topic, partition, result)] to send): ``results`` holds a result for
        every partition to read, in the order the response lists them (Kafka's: the partitions read, in their order,
        then the ones refused before any read: unknown topic or id, not authorized)."""
        return INVALID_SESSION_ID, []

    def throttled_response(self) -> int:
        """The session id of an empty response answered instead of a read (quota throttling, KIP-219); an
        incremental context consumes its epoch, a full one creates no session. Sets ``error_code`` like
        ``build_response`` would."""
        return INVALID_SESSION_ID


class SessionErrorContext(FetchContext):
    """A request naming a session we do not have (70), at another epoch (71), or on the other side of v13 (106)."""

    __slots__ = ()


class SessionlessFetchContext(FetchContext):
    """A full fetch that creates no session: epoch -1, a pre-v7 request, or an incremental request that emptied
    its session."""

    __slots__ = ("_parts", "_names")

    def __init__(self, fetch_data: Sequence[tuple[object, int, int, int, int]], names=None):
        super().__init__()
        self._parts = _dedup(fetch_data)
        self._names = names

    def partitions_to_read(self):
        names = self._names
        if names is None:
            return [(t, p, off, mb, t) for (t, p), (off, _ls, mb) in self._parts.items()]
        return [(t, p, off, mb, names.get(t)) for (t, p), (off, _ls, mb) in self._parts.items()]

    def build_response(self, results):
        return INVALID_SESSION_ID, _all_of(self._parts, results)


class FullFetchContext(SessionlessFetchContext):
    """A full fetch at epoch 0: after the read, a session is created from its partitions if a slot can be had."""

    __slots__ = ("_cache", "_privileged", "_session_id")

    def __init__(self, cache: FetchSessionCache, fetch_data, privileged: bool, names=None):
        super().__init__(fetch_data, names)
        self._cache = cache
        self._privileged = privileged
        self._session_id: int | None = None

    def build_response(self, results):
        out = _all_of(self._parts, results)
        if self._session_id is None:  # a second call answers the same session, it does not make another
            cached: dict[TP, CachedPartition] = {}
            names = self._names
            for t, p, r in out:  # in the response's order, as Kafka fills its session from the response
                off, ls, mb = self._parts[(t, p)]
                cached[(t, p)] = CachedPartition(off, ls, mb, -1 if r.error_code else r.high_watermark,
                                                 r.log_start_offset, t if names is None else names.get(t))
            self._session_id = self._cache._create(self._privileged, cached, names is not None)
        return self._session_id, out


class IncrementalFetchContext(FetchContext):
    """An incremental fetch of ``session``, valid while the session's epoch is the one this request moved it to."""

    __slots__ = ("_session", "_expected_epoch", "_order")
    incremental = True

    def __init__(self, session: FetchSession, names=None):
        super().__init__()
        self._session = session
        self._expected_epoch = session.epoch
        if names is not None:  # ids no topic had when they were added may name one now
            for (t, _p), cp in session.partitions.items():
                if cp.name is None:
                    cp.name = names.get(t)
        # the session's order cannot change without its epoch changing too, which makes this context stale
        self._order = [(t, p, cp.fetch_offset, cp.max_bytes, cp.name) for (t, p), cp in session.partitions.items()]

    @property
    def session_id(self) -> int:
        return self._session.id

    def _stale(self) -> bool:
        if self._session.epoch != self._expected_epoch:
            self.error_code = _BAD_EPOCH  # a duplicate or concurrent request of the same session got there first
            return True
        return False

    def partitions_to_read(self):
        return [] if self.error_code else list(self._order)

    def build_response(self, results):
        session = self._session
        if self._stale():
            return session.id, []
        parts = session.partitions
        out = []
        for (t, p), r in results.items():
            cp = parts.get((t, p))
            if cp is None:
                continue
            if cp.must_respond(r, True):
                out.append((t, p, r))
                if r.records_size > 0:
                    # served partitions go to the back of the queue: the next response budget starts with the others
                    del parts[(t, p)]
                    parts[(t, p)] = cp
        return session.id, out

    def throttled_response(self) -> int:
        self._stale()
        return self._session.id


def _name_of(topic, names) -> str | None:
    return topic if names is None else names.get(topic)


def _dedup(fetch_data) -> dict[TP, tuple[int, int, int]]:
    # Kafka's fetch data is a map: a partition listed twice is read once, at its first place, with its last values
    parts: dict[TP, tuple[int, int, int]] = {}
    for topic, partition, fetch_offset, log_start_offset, max_bytes in fetch_data:
        parts[(topic, partition)] = (fetch_offset, log_start_offset, max_bytes)
    return parts


def _all_of(parts: dict[TP, tuple[int, int, int]], results) -> list[tuple[object, int, PartitionResult]]:
    out = [(t, p, r) for (t, p), r in results.items() if (t, p) in parts]
    if len(out) != len(parts):  # a full response lists every partition asked for (kafka-python rejects one that
        missing = ", ".join(f"{t}-{p}" for t, p in parts if (t, p) not in results)  # does not)
        raise ValueError(f"no result for {missing}: a full fetch response must cover every requested partition")
    return out


# ------------------------------------------------------------------------------------------------------ the cache

class FetchSessionCache:
    """The broker's incremental fetch sessions (see the module docstring for the rules).

    Not thread-safe: every call (``new_context``, the contexts' methods, the metrics) is made on the broker's event
    loop thread. Nothing in here awaits, so a context's validation and its response cannot interleave with another
    request except between ``new_context`` and ``build_response`` (the long-poll wait), which the epoch check covers.

    ``clock`` returns seconds (``time.monotonic`` by default; tests pass a fake); ``rng`` draws session ids (by
    default ``random.SystemRandom``, so an id cannot be predicted from earlier ones).
    """

    def __init__(self, max_slots: int = DEFAULT_SLOTS, eviction_ms: int = EVICTION_MS,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None,
                 num_shards: int = NUM_SHARDS, rate_window_s: float = 60.0):
        if max_slots < 0:
            raise ValueError(f"max.incremental.fetch.session.cache.slots={max_slots}: must be >= 0")
        if num_shards < 1:
            raise ValueError(f"num_shards={num_shards}: must be >= 1")
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._clock = clock
        self._rng = rng if rng is not None else random.SystemRandom()
        # every shard gets at least one slot (8 shards of 0 slots would refuse every session)
        n = max(1, min(num_shards, max_slots))
        self.id_range = INT32_MAX // n
        self.shards = [
            FetchSessionCacheShard(i, max_slots // n + (1 if i < max_slots % n else 0), max(1, i * self.id_range),
                                   (i + 1) * self.id_range, eviction_ms, self._rng, self._evicted)
            for i in range(n)
        ]
        self._next_shard = 0
        self.evictions_total = 0
        self._eviction_times: deque[float] = deque()
        self._rate_window_s = rate_window_s
        self._started = clock()

    # -- requests -------------------------------------------------------------------------------------------------

    def new_context(self, version: int, session_id: int, session_epoch: int,
                    fetch_data: Sequence[tuple[object, int, int, int, int]], forgotten: Sequence[TP],
                    privileged: bool = False, names=None) -> FetchContext:
        """The context of one Fetch request. ``fetch_data``: (topic, partition, fetch_offset, log_start_offset,
        partition_max_bytes) as requested; ``forgotten``: (topic, partition) of ``forgotten_topics_data``;
        ``privileged``: the request comes from a follower (replica_id >= 0). From v13 topics are topic ids and
        ``names`` maps the ids of existing topics to their names."""
        if version >= TOPIC_IDS_FROM:
            if names is None:
                names = {}
        else:
            names = None
        if version < 7:
            return SessionlessFetchContext(fetch_data)
        if session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full request closes the session it names
            if session_epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data, names)
            return FullFetchContext(self, fetch_data, privileged, names)
        shard = self.shard_for(session_id)
        session = shard.get(session_id) if shard is not None else None
        if session is None:
            return SessionErrorContext(_NOT_FOUND)
        if session.epoch != session_epoch:
            return SessionErrorContext(_BAD_EPOCH)
        if session.uses_topic_ids != (names is not None):
            # partitions keyed by name cannot be continued by ids, nor the other way round (the session stays)
            return SessionErrorContext(_TOPIC_ID_USE)
        session.update(fetch_data, forgotten, names)
        if not session.partitions:
            shard.remove(session_id)
            return SessionlessFetchContext(fetch_data, names)
        shard.touch(session, self._now_ms())
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session, names)

    def _create(self, privileged: bool, partitions: dict[TP, CachedPartition], uses_topic_ids: bool = False) -> int:
        shard = self.shards[self._next_shard]
        self._next_shard = (self._next_shard + 1) % len(self.shards)
        return shard.maybe_create_session(self._now_ms(), privileged, partitions, uses_topic_ids)

    # -- sessions -------------------------------------------------------------------------------------------------

    def shard_for(self, session_id: int) -> FetchSessionCacheShard | None:
        if session_id <= 0:
            return None
        i = session_id // self.id_range
        return self.shards[i] if i < len(self.shards) else None

    def get(self, session_id: int) -> FetchSession | None:
        shard = self.shard_for(session_id)
        return shard.get(session_id) if shard is not None else None

    def remove(self, session_id: int) -> FetchSession | None:
        """Close a session (not an eviction)."""
        shard = self.shard_for(session_id)
        return shard.remove(session_id) if shard is not None else None

    def session_ids(self) -> list[int]:
        return [sid for shard in self.shards for sid in shard.sessions]

    def close_all(self) -> None:
        """Drop every session (broker shutdown); not counted as evictions."""
        for shard in self.shards:
            shard.clear()

    # -- metrics (Kafka's names: NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached,
    #    IncrementalFetchSessionEvictionsPerSec) --------------------------------------------------------------------

    @property
    def num_sessions(self) -> int:
        return sum(len(shard.sessions) for shard in self.shards)

    @property
    def num_partitions_cached(self) -> int:
        return sum(shard.num_partitions for shard in self.shards)

    def eviction_rate(self) -> float:
        """Evictions per second over the last ``rate_window_s`` (or since the cache started, if sooner; at least
        one second). Sessions closed by their client are not evictions."""
        now = self._clock()
        cutoff = now - self._rate_window_s
        times = self._eviction_times
        while times and times[0] <= cutoff:
            times.popleft()
        return len(times) / max(1.0, min(self._rate_window_s, now - self._started))

    def metrics(self) -> dict[str, float]:
        return {
            "NumIncrementalFetchSessions": self.num_sessions,
            "NumIncrementalFetchPartitionsCached": self.num_partitions_cached,
            "IncrementalFetchSessionEvictionsPerSec": self.eviction_rate(),
            "IncrementalFetchSessionEvictionsTotal": self.evictions_total,
        }

    def _evicted(self) -> None:
        self.evictions_total += 1
        now = self._clock()
        times = self._eviction_times
        times.append(now)
        cutoff = now - self._rate_window_s
        while times[0] <= cutoff:
            times.popleft()

    def _now_ms(self) -> int:
        return round(self._clock() * 1000)
