"""Incremental fetch sessions (KIP-227, kafkalog.broker.sessions): the scenarios of Kafka's FetchSessionTest as
behaviour, a model client (Kafka's FetchSessionHandler rules) against a model log, and random request sequences
checked against the cache's invariants. No network: the cache is pure Python with an injected clock."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.broker.sessions import (
    DEFAULT_SLOTS,
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    FetchSessionCache,
    FetchSessionCacheShard,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionResult,
    SessionErrorContext,
    SessionlessFetchContext,
    next_epoch,
)
from kafkalog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError

NOT_FOUND = 70
BAD_EPOCH = 71
V = 11  # the newest Fetch version the broker advertises


class Clock:
    """Seconds, moved by hand."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance_ms(self, ms: int) -> None:
        self.t += ms / 1000.0


def make(slots=10, eviction_ms=1000, shards=1, clock=None, seed=7, **kw):
    clock = clock or Clock()
    cache = FetchSessionCache(slots, eviction_ms, clock=clock, rng=random.Random(seed), num_shards=shards, **kw)
    return cache, clock


def fd(topic, partition, offset=0, max_bytes=100, log_start=0):
    return (topic, partition, offset, log_start, max_bytes)


def res(hwm, lso=0, size=0, error=0):
    return PartitionResult(error, hwm, hwm, lso, b"x" * size if size else None, size)


def full(cache, parts, results=None, sid=0, epoch=INITIAL_EPOCH, privileged=False):
    """A full fetch; returns (context, response session id, response partitions)."""
    ctx = cache.new_context(V, sid, epoch, parts, [], privileged=privileged)
    results = results or {(t, p): res(10) for t, p, *_ in parts}
    rsid, out = ctx.build_response(results)
    return ctx, rsid, out


def to_read(ctx):
    """What a context reads, without the topic names (before v13 a partition's topic is its name)."""
    out = ctx.partitions_to_read()
    assert all(name == t for t, _p, _off, _mb, name in out)
    return [x[:4] for x in out]


def keys(out):
    return [(t, p) for t, p, _ in out]


def order(cache, sid):
    return list(cache.get(sid).partitions)


# ---------------------------------------------------------------------------------------------------- epochs and ids

def test_next_epoch_wraps_to_one_and_never_returns_zero():
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(1) == 2
    assert next_epoch(INT32_MAX - 1) == INT32_MAX
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_error_codes_are_kafkas():
    assert FetchSessionIdNotFoundError.code == NOT_FOUND
    assert InvalidFetchSessionEpochError.code == BAD_EPOCH


def test_new_session_ids_are_positive_and_in_the_shard_range():
    cache, _ = make(slots=DEFAULT_SLOTS, shards=8)
    for shard in cache.shards:
        for _ in range(2000):
            sid = shard.new_session_id()
            assert shard.id_low <= sid < shard.id_high
            assert 0 < sid < INT32_MAX
            assert cache.shard_for(sid) is shard


class _CollidingRng(random.Random):
    """Draws from the first ``width`` ids of a range only, so collisions with live sessions are certain."""

    def __init__(self, seed, width=4):
        super().__init__(seed)
        self.width = width

    def randrange(self, start, stop=None, step=1):
        return start + super().randrange(0, self.width)


def test_session_ids_are_unique_even_when_the_generator_repeats_itself():
    cache = FetchSessionCache(4, 1000, clock=Clock(), rng=_CollidingRng(1), num_shards=1)
    ids = {full(cache, [fd("t", i)])[1] for i in range(4)}
    assert len(ids) == 4 and 0 not in ids
    assert sorted(ids) == [1, 2, 3, 4]  # shard 0's range starts at 1: id 0 is never drawn


# ---------------------------------------------------------------------------------------------------- full requests

def test_sessionless_request_creates_no_session():
    cache, _ = make()
    ctx = cache.new_context(V, 0, FINAL_EPOCH, [fd("foo", 0), fd("foo", 1, 10)], [])
    assert type(ctx) is SessionlessFetchContext and ctx.error_code == 0
    assert to_read(ctx) == [("foo", 0, 0, 100), ("foo", 1, 10, 100)]
    sid, out = ctx.build_response({("foo", 0): res(5), ("foo", 1): res(10)})
    assert sid == 0 and keys(out) == [("foo", 0), ("foo", 1)]
    assert cache.num_sessions == 0


def test_requests_before_v7_are_sessionless_whatever_they_carry():
    cache, _ = make()
    ctx = cache.new_context(6, 0, INITIAL_EPOCH, [fd("foo", 0)], [])
    assert type(ctx) is SessionlessFetchContext
    assert ctx.build_response({("foo", 0): res(1)})[0] == 0
    assert cache.num_sessions == 0


def test_full_request_at_epoch_zero_creates_a_session_with_the_response_state():
    cache, _ = make()
    parts = [fd("foo", 0, 0, 100, 0), fd("foo", 1, 10, 200, 3)]
    ctx = cache.new_context(V, 0, INITIAL_EPOCH, parts, [])
    assert type(ctx) is FullFetchContext
    assert to_read(ctx) == [("foo", 0, 0, 100), ("foo", 1, 10, 200)]
    sid, out = ctx.build_response({("foo", 0): res(100, lso=100), ("foo", 1): res(10, lso=10, size=7)})
    assert sid > 0
    assert keys(out) == [("foo", 0), ("foo", 1)]
    s = cache.get(sid)
    assert s.epoch == 1 and not s.privileged
    foo1 = s.partitions[("foo", 1)]
    assert (foo1.fetch_offset, foo1.max_bytes, foo1.fetcher_log_start_offset) == (10, 200, 3)
    assert (foo1.high_watermark, foo1.local_log_start_offset) == (10, 10)
    assert cache.num_sessions == 1 and cache.num_partitions_cached == 2
    # building the same response again answers the same session instead of creating another
    assert ctx.build_response({("foo", 0): res(100, lso=100), ("foo", 1): res(10, lso=10)})[0] == sid
    assert cache.num_sessions == 1


def test_a_partition_listed_twice_is_read_once_with_its_last_values():
    cache, _ = make()
    ctx = cache.new_context(V, 0, INITIAL_EPOCH, [fd("a", 0, 1), fd("b", 0), fd("a", 0, 5)], [])
    assert to_read(ctx) == [("a", 0, 5, 100), ("b", 0, 0, 100)]


def test_full_response_must_cover_every_requested_partition():
    cache, _ = make()
    ctx = cache.new_context(V, 0, INITIAL_EPOCH, [fd("a", 0), fd("a", 1)], [])
    with pytest.raises(ValueError, match="a-1"):
        ctx.build_response({("a", 0): res(1)})
    assert cache.num_sessions == 0


@pytest.mark.parametrize("epoch", [INITIAL_EPOCH, FINAL_EPOCH])
def test_full_request_naming_a_session_closes_it(epoch):
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0), fd("foo", 1)])
    ctx, new_sid, out = full(cache, [fd("bar", 0), fd("bar", 1)], sid=sid, epoch=epoch)
    assert cache.get(sid) is None
    assert keys(out) == [("bar", 0), ("bar", 1)]
    if epoch == FINAL_EPOCH:
        assert type(ctx) is SessionlessFetchContext and new_sid == 0 and cache.num_sessions == 0
    else:
        assert new_sid not in (0, sid) and cache.session_ids() == [new_sid]
    assert cache.evictions_total == 0  # a client closing its own session is not an eviction
    assert cache.new_context(V, sid, 1, [], []).error_code == NOT_FOUND


# ---------------------------------------------------------------------------------------------------- session errors

def test_unknown_session_id_is_70_with_nothing_read():
    cache, _ = make(slots=DEFAULT_SLOTS, shards=8)
    _, sid, _ = full(cache, [fd("foo", 0)])
    for bad in (sid + 1, -5, INT32_MAX, cache.id_range * 8):  # the last ids are past the last shard's range
        ctx = cache.new_context(V, bad, 1, [fd("foo", 0)], [])
        assert type(ctx) is SessionErrorContext and ctx.error_code == NOT_FOUND
        assert to_read(ctx) == []
        assert ctx.build_response({("foo", 0): res(10)}) == (0, [])
    assert cache.get(sid).epoch == 1  # untouched


def test_wrong_epoch_is_71_and_the_session_still_expects_its_epoch():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0)])
    for bad in (5, 2, -3):
        ctx = cache.new_context(V, sid, bad, [fd("foo", 0, 99)], [])
        assert type(ctx) is SessionErrorContext and ctx.error_code == BAD_EPOCH
        assert to_read(ctx) == [] and ctx.build_response({}) == (0, [])
    s = cache.get(sid)
    assert s.epoch == 1 and s.partitions[("foo", 0)].fetch_offset == 0  # the bad request changed nothing
    ctx = cache.new_context(V, sid, 1, [], [])
    assert type(ctx) is IncrementalFetchContext and ctx.error_code == 0
    # the same epoch again (a duplicate) is now stale
    assert cache.new_context(V, sid, 1, [], []).error_code == BAD_EPOCH


def test_a_context_whose_session_moved_on_answers_71_and_changes_nothing():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0), fd("foo", 1)], {("foo", 0): res(10), ("foo", 1): res(10)})
    slow = cache.new_context(V, sid, 1, [], [])  # e.g. waiting in a long poll
    fast = cache.new_context(V, sid, 2, [], [])  # the client's next request overtook it
    assert to_read(slow) == [("foo", 0, 0, 100), ("foo", 1, 0, 100)]
    rsid, out = slow.build_response({("foo", 0): res(20, size=5), ("foo", 1): res(10)})
    assert slow.error_code == BAD_EPOCH and out == [] and rsid == sid
    assert cache.get(sid).partitions[("foo", 0)].high_watermark == 10
    assert to_read(slow) == []
    rsid, out = fast.build_response({("foo", 0): res(20, size=5), ("foo", 1): res(10)})
    assert fast.error_code == 0 and rsid == sid and keys(out) == [("foo", 0)]


def test_epoch_wraps_from_int32_max_to_one():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0)])
    cache.get(sid).epoch = INT32_MAX
    assert cache.new_context(V, sid, INT32_MAX, [], []).error_code == 0
    assert cache.get(sid).epoch == 1
    ctx = cache.new_context(V, sid, 1, [], [])
    assert type(ctx) is IncrementalFetchContext and ctx.error_code == 0
    assert cache.get(sid).epoch == 2


# ---------------------------------------------------------------------------------------------------- incremental

def test_incremental_request_adds_updates_and_forgets_partitions():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0, 0), fd("foo", 1, 10)],
                     {("foo", 0): res(100, lso=100), ("foo", 1): res(10, lso=10)})
    ctx = cache.new_context(V, sid, 1, [fd("bar", 0, 15, 0)], [("foo", 0)])
    assert type(ctx) is IncrementalFetchContext
    assert to_read(ctx) == [("foo", 1, 10, 100), ("bar", 0, 15, 0)]
    rsid, out = ctx.build_response({("foo", 1): res(10, lso=10), ("bar", 0): res(10, lso=10)})
    assert rsid == sid and keys(out) == [("bar", 0)]  # foo-1 unchanged, bar-0 new
    assert cache.num_partitions_cached == 2
    # an update keeps the partition's place and takes the new offset, max bytes and fetcher log start offset
    ctx = cache.new_context(V, sid, 2, [fd("foo", 1, 12, 300, 4)], [("nope", 9)])
    assert to_read(ctx) == [("foo", 1, 12, 300), ("bar", 0, 15, 0)]
    assert cache.get(sid).partitions[("foo", 1)].fetcher_log_start_offset == 4


def test_incremental_response_carries_only_what_changed():
    cache, _ = make()
    names = ["same", "records", "hwm", "logstart", "error", "lso_only"]
    parts = [fd(n, 0) for n in names]
    _, sid, _ = full(cache, parts, {(n, 0): res(10, lso=2) for n in names})
    ctx = cache.new_context(V, sid, 1, [], [])
    results = {
        ("same", 0): res(10, lso=2),
        ("records", 0): res(10, lso=2, size=50),
        ("hwm", 0): res(11, lso=2),
        ("logstart", 0): res(10, lso=3),
        ("error", 0): res(-1, lso=-1, error=3),
        ("lso_only", 0): PartitionResult(0, 10, 7, 2, None, 0),  # last stable offset alone is not a change
    }
    _, out = ctx.build_response(results)
    assert keys(out) == [("records", 0), ("hwm", 0), ("logstart", 0), ("error", 0)]
    assert dict(((t, p), r) for t, p, r in out)[("hwm", 0)] is results[("hwm", 0)]
    # the next idle round has nothing to say about any of them, except the partition still in error
    results.update({("records", 0): res(10, lso=2), ("hwm", 0): res(11, lso=2), ("logstart", 0): res(10, lso=3)})
    _, out = cache.new_context(V, sid, 2, [], []).build_response(results)
    assert keys(out) == [("error", 0)]


def test_a_partition_in_error_is_resent_until_the_error_clears_and_once_after():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0)], {("foo", 0): res(-1, lso=-1, error=3)})
    assert cache.get(sid).partitions[("foo", 0)].high_watermark == -1
    epoch = 1
    for _ in range(3):
        _, out = cache.new_context(V, sid, epoch, [], []).build_response({("foo", 0): res(-1, lso=-1, error=3)})
        epoch += 1
        assert keys(out) == [("foo", 0)]
    # the topic is back with hwm 10: sent once (hwm changed), then not
    _, out = cache.new_context(V, sid, epoch, [], []).build_response({("foo", 0): res(10, lso=0)})
    assert keys(out) == [("foo", 0)]
    _, out = cache.new_context(V, sid, epoch + 1, [], []).build_response({("foo", 0): res(10, lso=0)})
    assert out == []


def test_an_error_with_an_unchanged_high_watermark_still_resets_it():
    # a partition erring at hwm 10 and then healthy at hwm 10 is sent again: the cached hwm was set to -1
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0)], {("foo", 0): res(10)})
    _, out = cache.new_context(V, sid, 1, [], []).build_response({("foo", 0): PartitionResult(6, 10, 10, 0, None,
                                                                                                 0)})
    assert keys(out) == [("foo", 0)]
    _, out = cache.new_context(V, sid, 2, [], []).build_response({("foo", 0): res(10)})
    assert keys(out) == [("foo", 0)]


def test_idle_rounds_carry_no_partition_and_keep_the_session():
    cache, clock = make()
    parts = [fd("t", i) for i in range(50)]
    _, sid, out = full(cache, parts)
    assert len(out) == 50
    for epoch in range(1, 6):
        clock.advance_ms(500)
        ctx = cache.new_context(V, sid, epoch, [], [])
        assert len(to_read(ctx)) == 50  # every partition is read ...
        rsid, out = ctx.build_response({(t, p): res(10) for t, p, *_ in parts})
        assert rsid == sid and out == []  # ... and none is sent
    assert cache.get(sid).epoch == 6
    assert cache.get(sid).last_used_ms == round(clock.t * 1000)


def test_unread_partitions_are_left_out_of_an_incremental_response():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("a", 0), fd("b", 0)], {("a", 0): res(1), ("b", 0): res(1)})
    _, out = cache.new_context(V, sid, 1, [], []).build_response({("b", 0): res(2)})
    assert keys(out) == [("b", 0)]
    assert cache.get(sid).partitions[("a", 0)].high_watermark == 1


def test_emptying_a_session_removes_it_and_the_answer_is_sessionless():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0), fd("foo", 1, 10)])
    ctx = cache.new_context(V, sid, 1, [], [("foo", 0), ("foo", 1)])
    assert type(ctx) is SessionlessFetchContext
    assert to_read(ctx) == []
    assert ctx.build_response({}) == (0, [])
    assert cache.num_sessions == 0 and cache.num_partitions_cached == 0 and cache.evictions_total == 0
    assert cache.new_context(V, sid, 2, [], []).error_code == NOT_FOUND


def test_throttled_responses():
    cache, _ = make()
    # a throttled full fetch creates no session (KIP-219: nothing read, nothing remembered)
    ctx = cache.new_context(V, 0, INITIAL_EPOCH, [fd("foo", 0)], [])
    assert ctx.throttled_response() == 0 and ctx.error_code == 0 and cache.num_sessions == 0
    _, sid, _ = full(cache, [fd("foo", 0)])
    # a throttled incremental fetch keeps the session and consumes its epoch
    ctx = cache.new_context(V, sid, 1, [], [])
    assert ctx.throttled_response() == sid and ctx.error_code == 0
    assert cache.new_context(V, sid, 1, [], []).error_code == BAD_EPOCH
    stale = cache.new_context(V, sid, 2, [], [])
    cache.new_context(V, sid, 3, [], [])
    assert stale.throttled_response() == sid and stale.error_code == BAD_EPOCH
    err = cache.new_context(V, sid + 1, 1, [], [])
    assert err.throttled_response() == 0 and err.error_code == NOT_FOUND


# ---------------------------------------------------------------------------------------------------- rotation

def test_only_partitions_that_returned_records_move_to_the_end():
    cache, _ = make()
    parts = [fd("foo", 1, 100, 1000), fd("bar", 2, 100, 1000), fd("zar", 3, 100, 1000)]
    _, sid, out = full(cache, parts, {("foo", 1): res(50), ("bar", 2): res(50), ("zar", 3): res(50)})
    assert keys(out) == [("foo", 1), ("bar", 2), ("zar", 3)]
    ctx = cache.new_context(V, sid, 1, parts, [])
    assert [(t, p) for t, p, *_ in to_read(ctx)] == [("foo", 1), ("bar", 2), ("zar", 3)]
    assert ctx.build_response({}) == (sid, [])
    # foo-1 changed its hwm only, bar-2 returned records: only bar-2 goes to the back
    _, out = ctx.build_response({("foo", 1): res(60), ("bar", 2): res(60, size=20), ("zar", 3): res(50)})
    assert keys(out) == [("foo", 1), ("bar", 2)]
    assert order(cache, sid) == [("foo", 1), ("zar", 3), ("bar", 2)]
    ctx = cache.new_context(V, sid, 2, [], [])
    assert [(t, p) for t, p, *_ in to_read(ctx)] == [("foo", 1), ("zar", 3), ("bar", 2)]


class ModelLog:
    """One partition of a model log: record i has size sizes[i]."""

    def __init__(self, sizes=()):
        self.sizes = list(sizes)
        self.start = 0

    @property
    def hwm(self):
        return len(self.sizes)


def read(logs, parts, max_bytes):
    """What api._fetch_once does, on model logs: whole records up to min(partition max, what is left of max_bytes);
    the first partition with data returns at least one record, whatever its max (KIP-74)."""
    results, total = {}, 0
    for t, p, off, pmax in parts:
        lg = logs.get((t, p))
        if lg is None:
            results[(t, p)] = PartitionResult(3, -1, -1, -1, None, 0)
            continue
        if off < lg.start or off > lg.hwm:
            results[(t, p)] = PartitionResult(1, -1, -1, -1, None, 0)
            continue
        budget = min(pmax, max_bytes - total)
        taken, size = [], 0
        for o in range(off, lg.hwm):
            if size + lg.sizes[o] > budget and not (total == 0 and not taken):
                break
            taken.append(o)
            size += lg.sizes[o]
        total += size
        results[(t, p)] = PartitionResult(0, lg.hwm, lg.hwm, lg.start, tuple(taken) or None, size)
    return results


def test_rotation_serves_a_partition_that_never_fits_its_budget():
    # "big" has records of 500 bytes but a partition max of 100: it gets data only when it is the first partition
    # with data in the response (KIP-74). Five busy partitions ahead of it always have data.
    logs = {("busy", i): ModelLog([50] * 10_000) for i in range(5)}
    logs[("big", 0)] = ModelLog([500] * 3)
    request = [fd("busy", i, 0, 100) for i in range(5)] + [fd("big", 0, 0, 100)]

    # sessionless, same order every time (no client rotation): big-0 starves
    offsets = {(t, p): 0 for t, p, *_ in request}
    for _ in range(30):
        parts = [(t, p, offsets[(t, p)], mb) for t, p, _o, _l, mb in request]
        for (t, p), r in read(logs, parts, 1000).items():
            if r.records:
                offsets[(t, p)] = r.records[-1] + 1
    assert offsets[("big", 0)] == 0

    # with a session, busy partitions that returned data go to the back and big-0 comes to the front
    cache, _ = make()
    offsets = {(t, p): 0 for t, p, *_ in request}
    ctx = cache.new_context(V, 0, INITIAL_EPOCH, request, [])
    sid, out = ctx.build_response(read(logs, to_read(ctx), 1000))
    epoch, rounds = 1, 1
    while offsets[("big", 0)] < 3:
        changed = []
        for t, p, r in out:
            if r.records:
                offsets[(t, p)] = r.records[-1] + 1
                changed.append(fd(t, p, offsets[(t, p)], 100))
        ctx = cache.new_context(V, sid, epoch, changed, [])
        assert type(ctx) is IncrementalFetchContext
        rsid, out = ctx.build_response(read(logs, to_read(ctx), 1000))
        assert rsid == sid
        epoch, rounds = epoch + 1, rounds + 1
        assert rounds < 40, offsets
    assert all(offsets[("busy", i)] > 0 for i in range(5))


# ---------------------------------------------------------------------------------------------------- eviction

def test_session_cache_eviction_rules_on_one_shard():
    # Kafka's testSessionCache: 3 slots, 100 ms eviction, sessions touched at chosen times
    evicted = []
    shard = FetchSessionCacheShard(0, 3, 1, INT32_MAX, 100, random.Random(3), lambda: evicted.append(1))

    def create(now, size, privileged=False):
        return shard.maybe_create_session(now, privileged, {("t", i): None for i in range(size)})

    id1, id2, id3 = create(0, 10), create(10, 20), create(20, 30)
    assert 0 not in (id1, id2, id3)
    assert create(30, 40) == 0  # nobody idle > 100 ms, nobody older than 100 ms
    assert create(40, 5) == 0
    assert set(shard.sessions) == {id1, id2, id3}
    shard.touch(shard.get(id1), 200)
    id4 = create(210, 11)  # id2 has been idle 200 ms: the least recently used goes
    assert set(shard.sessions) == {id1, id3, id4}
    shard.touch(shard.get(id1), 400)
    shard.touch(shard.get(id3), 390)
    shard.touch(shard.get(id4), 400)
    id5 = create(410, 50)  # nobody idle; id1 (10 partitions, aged) is the least valuable and 50 >= 10
    assert set(shard.sessions) == {id3, id4, id5}
    assert create(410, 5) == 0  # id4 (11, aged) is worth more than a newcomer with 5
    id6 = create(410, 5, privileged=True)  # a follower may evict any consumer session, even a young one
    assert set(shard.sessions) == {id3, id5, id6}
    assert len(evicted) == 3


def test_partition_counts_follow_resizes_removals_and_evictions():
    # Kafka's testResizeCachedSessions, through requests
    cache, clock = make(slots=2, eviction_ms=100)
    _, id1, _ = full(cache, [fd("t", i) for i in range(2)])
    assert cache.num_partitions_cached == 2 and cache.num_sessions == 1
    _, id2, _ = full(cache, [fd("u", i) for i in range(4)])
    assert cache.num_partitions_cached == 6 and cache.num_sessions == 2 and cache.evictions_total == 0
    clock.advance_ms(200)
    cache.new_context(V, id1, 1, [], [])
    cache.new_context(V, id2, 1, [], [])
    _, id3, _ = full(cache, [fd("v", i) for i in range(5)])  # both aged: the one with 2 partitions goes
    assert set(cache.session_ids()) == {id2, id3}
    assert cache.num_partitions_cached == 9 and cache.evictions_total == 1
    cache.remove(id3)
    assert cache.session_ids() == [id2] and cache.num_partitions_cached == 4 and cache.evictions_total == 1
    cache.new_context(V, id2, 2, [fd("w", 0)], [("u", 0), ("u", 1)])
    assert cache.num_partitions_cached == 3


def test_the_least_recently_used_idle_session_is_evicted_first():
    # Kafka's testFetchSessionExpiration: 2 slots, 1000 ms
    cache, clock = make(slots=2, eviction_ms=1000)
    parts = [fd("foo", 0), fd("foo", 1, 10)]
    _, s1, _ = full(cache, parts)
    clock.advance_ms(500)
    _, s2, _ = full(cache, parts)
    assert cache.get(s1) and cache.get(s2)
    clock.advance_ms(500)
    assert cache.new_context(V, s1, 1, [], []).error_code == 0  # session 1 is used again
    clock.advance_ms(501)
    _, s3, _ = full(cache, parts)
    # s2 has been idle 1001 ms; s1 only 501 ms
    assert s3 != 0 and cache.get(s1) is not None and cache.get(s2) is None
    assert cache.evictions_total == 1


def test_privileged_sessions_are_kept_over_consumer_ones_until_they_age():
    # Kafka's testPrivilegedSessionHandling: 2 slots, 1000 ms
    cache, clock = make(slots=2, eviction_ms=1000)
    parts = [fd("foo", 0), fd("foo", 1, 10)]
    _, s1, _ = full(cache, parts, privileged=True)
    assert cache.get(s1).privileged
    clock.advance_ms(500)
    _, s2, _ = full(cache, parts)
    assert cache.num_sessions == 2
    clock.advance_ms(500)
    _, s3, _ = full(cache, parts, privileged=True)
    # s2 is younger than s1 and not idle, but it is a consumer's: the follower's newcomer evicts it
    assert s3 != 0 and cache.get(s1) and cache.get(s2) is None and cache.get(s3)
    clock.advance_ms(501)
    _, s4, _ = full(cache, parts, privileged=True)
    # s1 is privileged but idle for 1001 ms: gone
    assert s4 != 0 and cache.get(s1) is None and cache.get(s3) and cache.get(s4)
    assert cache.evictions_total == 2


def test_consumer_sessions_are_protected_for_the_eviction_time_after_creation():
    cache, clock = make(slots=2, eviction_ms=120_000)
    _, s1, _ = full(cache, [fd("a", 0)])
    _, s2, _ = full(cache, [fd("b", 0)])
    epochs = {s1: 1, s2: 1}
    for _ in range(5):  # both stay in use
        clock.advance_ms(20_000)
        for sid in (s1, s2):
            cache.new_context(V, sid, epochs[sid], [], [])
            epochs[sid] += 1
    # 100 s old: a newcomer with many partitions is refused and answered sessionless (all partitions, id 0)
    ctx, sid, out = full(cache, [fd("big", i) for i in range(50)])
    assert sid == 0 and len(out) == 50 and cache.num_sessions == 2 and cache.evictions_total == 0
    clock.advance_ms(20_001)
    for sid in (s1, s2):
        cache.new_context(V, sid, epochs[sid], [], [])  # still in use: not idle, but now older than 120 s
    # a newcomer with as many partitions is not worth more than them; one with more is
    assert full(cache, [fd("c", 0)])[1] == 0
    _, s3, _ = full(cache, [fd("c", 0), fd("c", 1)])
    assert s3 != 0 and cache.num_sessions == 2 and cache.evictions_total == 1
    # the smaller id went first among equals: (privileged, partition count, id) ordering
    assert cache.get(min(s1, s2)) is None and cache.get(max(s1, s2)) is not None


def test_no_slot_means_a_full_response_with_session_id_zero():
    cache, _ = make(slots=1, eviction_ms=1000)
    _, s1, _ = full(cache, [fd("a", 0)])
    ctx, sid, out = full(cache, [fd("b", 0), fd("b", 1)])
    assert type(ctx) is FullFetchContext and sid == 0 and keys(out) == [("b", 0), ("b", 1)]
    assert cache.session_ids() == [s1]


def test_zero_slots_disable_sessions():
    cache, _ = make(slots=0, shards=8)
    for _ in range(3):
        assert full(cache, [fd("a", 0)])[1] == 0
    assert cache.num_sessions == 0 and cache.evictions_total == 0


# ---------------------------------------------------------------------------------------------------- shards

def test_default_cache_is_eight_shards_of_125_slots_with_disjoint_id_ranges():
    cache = FetchSessionCache(clock=Clock())
    assert cache.max_slots == 1000 and cache.eviction_ms == EVICTION_MS == 120_000
    assert [s.capacity for s in cache.shards] == [125] * 8
    assert cache.id_range == INT32_MAX // 8
    assert cache.shard_for(cache.id_range - 1) is cache.shards[0]
    assert cache.shard_for(cache.id_range) is cache.shards[1]
    assert cache.shard_for(cache.id_range * 2) is cache.shards[2]
    assert cache.shard_for(cache.id_range * 8) is None and cache.shard_for(0) is None


def test_slots_are_divided_so_that_they_add_up():
    assert [s.capacity for s in make(slots=10, shards=8)[0].shards] == [2, 2, 1, 1, 1, 1, 1, 1]
    assert [s.capacity for s in make(slots=3, shards=8)[0].shards] == [1, 1, 1]


def test_new_sessions_go_to_the_shards_round_robin():
    cache, _ = make(slots=DEFAULT_SLOTS, shards=8)
    ids = [full(cache, [fd("t", i)])[1] for i in range(16)]
    assert [cache.shard_for(sid).index for sid in ids] == list(range(8)) * 2
    assert len(set(ids)) == 16
    # a session is found through its id's shard
    for sid in ids:
        assert cache.new_context(V, sid, 1, [], []).error_code == 0


def test_a_full_shard_refuses_even_when_others_have_room():
    # Kafka's sharding: a newcomer competes only within the shard it is given
    cache, _ = make(slots=2, shards=2)
    a = full(cache, [fd("a", 0)])[1]
    b = full(cache, [fd("b", 0)])[1]
    cache.remove(b)  # shard 1 has room again, shard 0 is full
    assert full(cache, [fd("c", 0)])[1] == 0  # given shard 0
    d = full(cache, [fd("d", 0)])[1]  # given shard 1
    assert cache.shard_for(a).index == 0 and d != 0 and cache.shard_for(d).index == 1


# ---------------------------------------------------------------------------------------------------- metrics

def test_the_three_metrics():
    cache, clock = make(slots=2, eviction_ms=1000, rate_window_s=60.0)
    m = cache.metrics()
    assert m == {"NumIncrementalFetchSessions": 0, "NumIncrementalFetchPartitionsCached": 0,
                 "IncrementalFetchSessionEvictionsPerSec": 0.0, "IncrementalFetchSessionEvictionsTotal": 0}
    _, s1, _ = full(cache, [fd("a", i) for i in range(3)])
    _, s2, _ = full(cache, [fd("b", i) for i in range(4)])
    assert (cache.num_sessions, cache.num_partitions_cached) == (2, 7)
    cache.new_context(V, s1, 1, [fd("a", 9)], [])
    assert cache.num_partitions_cached == 8
    clock.advance_ms(1001)
    full(cache, [fd("c", 0)])  # evicts the least recently used (s2)
    clock.advance_ms(1001)
    full(cache, [fd("d", 0)])  # evicts s1
    assert cache.evictions_total == 2 and cache.num_sessions == 2 and cache.num_partitions_cached == 2
    # the cache is 2 s old: 2 evictions over the 2 s it has lived
    assert cache.eviction_rate() == pytest.approx(1.0, rel=0.01)
    clock.advance_ms(18_000)
    assert cache.eviction_rate() == pytest.approx(2 / 20.002, rel=0.01)
    clock.advance_ms(60_000)
    assert cache.eviction_rate() == 0.0 and cache.evictions_total == 2  # out of the window; the total stays
    assert cache.metrics()["IncrementalFetchSessionEvictionsTotal"] == 2


def test_closing_sessions_is_not_an_eviction():
    cache, _ = make()
    sids = [full(cache, [fd("a", i)])[1] for i in range(4)]
    full(cache, [fd("a", 0)], sid=sids[0])  # closed by a full request (and a new one made)
    cache.new_context(V, sids[1], 1, [], [("a", 1)])  # emptied
    cache.remove(sids[2])
    assert cache.evictions_total == 0 and cache.eviction_rate() == 0.0
    assert cache.num_sessions == 2


def test_close_all():
    cache, _ = make(slots=20, shards=8)
    sids = [full(cache, [fd("a", i), fd("b", i)])[1] for i in range(10)]
    assert cache.num_sessions == 10 and cache.num_partitions_cached == 20
    cache.close_all()
    assert cache.num_sessions == 0 and cache.num_partitions_cached == 0 and cache.evictions_total == 0
    assert all(cache.new_context(V, sid, 1, [], []).error_code == NOT_FOUND for sid in sids)


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="slots"):
        FetchSessionCache(-1)
    with pytest.raises(ValueError, match="num_shards"):
        FetchSessionCache(10, num_shards=0)


# ---------------------------------------------------------------------------------------------------- model client

class ModelClient:
    """Kafka's FetchSessionHandler (and kafka-python's) rules for what to send and how to read the answer."""

    def __init__(self, wanted: dict, max_bytes=100):
        self.wanted = wanted  # (topic, partition) -> next fetch offset
        self.max_bytes = max_bytes
        self.sid, self.epoch = 0, INITIAL_EPOCH
        self.sent: dict = {}  # what the session holds, as the client believes
        self.kinds: list[str] = []

    def request(self):
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self.kinds.append("full")
            data = [fd(t, p, off, self.max_bytes) for (t, p), off in self.wanted.items()]
            return self.sid, self.epoch, data, []
        self.kinds.append("incremental")
        data = [fd(t, p, off, self.max_bytes) for (t, p), off in self.wanted.items() if self.sent.get((t, p)) != off]
        forgotten = [tp for tp in self.sent if tp not in self.wanted]
        return self.sid, self.epoch, data, forgotten

    def response(self, error, sid, out, full_request):
        if error:
            self.sid, self.epoch = (0, INITIAL_EPOCH) if error == NOT_FOUND else (self.sid, INITIAL_EPOCH)
            return []
        got = []
        for t, p, r in out:
            if r.records:
                assert r.records[0] == self.wanted[(t, p)], "records must continue where the client is"
                got.extend((t, p, o) for o in r.records)
                self.wanted[(t, p)] = r.records[-1] + 1
        if full_request:
            assert sorted(keys(out)) == sorted(self.sent_now)
        if sid == 0:
            self.sid, self.epoch = 0, INITIAL_EPOCH
        elif full_request:
            self.sid, self.epoch = sid, 1
        else:
            self.epoch = next_epoch(self.epoch)
        return got

    def round(self, cache, logs, max_bytes=10_000):
        sid, epoch, data, forgotten = self.request()
        full_request = epoch in (INITIAL_EPOCH, FINAL_EPOCH)
        self.sent_now = [(t, p) for t, p, *_ in data]
        ctx = cache.new_context(V, sid, epoch, data, forgotten)
        if ctx.error_code:
            return self.response(ctx.error_code, 0, [], full_request), 0
        rsid, out = ctx.build_response(read(logs, to_read(ctx), max_bytes))
        if ctx.error_code:
            return self.response(ctx.error_code, rsid, [], full_request), 0
        got = self.response(0, rsid, out, full_request)
        # the broker caches the fetch offsets of the requests: the client sends a partition again when it moved
        if not rsid:
            self.sent = {}
        else:
            if full_request:
                self.sent = {}
            self.sent.update({(t, p): off for t, p, off, _ls, _mb in data})
            for tp in forgotten:
                self.sent.pop(tp, None)
        return got, len(out)


def test_a_session_client_gets_every_record_and_idle_rounds_carry_nothing():
    rng = random.Random(11)
    logs = {("t", i): ModelLog() for i in range(40)}
    client = ModelClient({tp: 0 for tp in logs})
    cache, clock = make(slots=4)
    received = []
    produced = 0
    for rnd in range(400):
        if rnd < 40:
            for tp in rng.sample(sorted(logs), 3):
                for _ in range(rng.randint(1, 5)):
                    logs[tp].sizes.append(rng.randint(10, 300))
                    produced += 1
        elif len(received) == produced:
            break
        # partition max 100 bytes, response max 2000: most rounds carry only part of what is there
        got, _ = client.round(cache, logs, max_bytes=2000)
        received.extend(got)
        clock.advance_ms(100)
    assert len(received) == produced
    assert len(set(received)) == produced
    assert client.kinds[0] == "full" and set(client.kinds[1:]) == {"incremental"}
    # caught up: an idle round reads 40 partitions and sends none
    _, sent = client.round(cache, logs)
    assert sent == 0


def test_a_session_client_recovers_after_its_session_is_evicted():
    logs = {("t", i): ModelLog([20] * 5) for i in range(3)}
    client = ModelClient({tp: 0 for tp in logs})
    cache, clock = make(slots=1, eviction_ms=1000)
    got, _ = client.round(cache, logs, max_bytes=40)
    assert client.sid != 0
    clock.advance_ms(1001)
    other = ModelClient({("t", 0): 0})
    other.round(cache, logs)  # evicts the idle session of the first client
    assert cache.evictions_total == 1
    got2, _ = client.round(cache, logs)
    assert got2 == [] and client.sid == 0 and client.epoch == 0  # 70: start over with a full fetch
    received = got
    for _ in range(10):
        received += client.round(cache, logs)[0]
    assert len(received) == 15 and len(set(received)) == 15


# ---------------------------------------------------------------------------------------------------- random sequences

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("full"), st.integers(0, 5), st.integers(0, 6), st.booleans(), st.booleans()),
        st.tuples(st.just("inc"), st.integers(0, 5), st.lists(st.integers(0, 8), max_size=3),
                  st.lists(st.integers(0, 8), max_size=3), st.sampled_from([0, 0, 0, 1, 2])),
        st.tuples(st.just("wait"), st.integers(0, 1500)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, slots=st.integers(0, 6), shards=st.sampled_from([1, 2, 8]), seed=st.integers(0, 2**16))
def test_random_request_sequences_keep_the_cache_consistent(ops, slots, shards, seed):
    clock = Clock()
    cache = FetchSessionCache(slots, 1000, clock=clock, rng=_CollidingRng(seed, width=8), num_shards=shards)
    clients = [(0, 0) for _ in range(6)]  # (session id, next epoch) each client believes in
    closed = 0  # sessions ended by their clients, not by eviction
    for op in ops:
        live_before = set(cache.session_ids())
        if op[0] == "wait":
            clock.advance_ms(op[1])
            continue
        if op[0] == "full":
            _, c, n, final, close_old = op
            sid = clients[c][0] if close_old else 0
            parts = [fd("t", i) for i in range(n)]
            ctx = cache.new_context(V, sid, FINAL_EPOCH if final else INITIAL_EPOCH, parts, [])
            new_sid, out = ctx.build_response({(t, p): res(1) for t, p, *_ in parts})
            assert keys(out) == [(t, p) for t, p, *_ in parts]
            if sid in live_before:
                closed += 1
            if new_sid:
                # a new id is never one of a session that lives on (an evicted or closed session's id may return)
                assert not final and new_sid not in live_before & (set(cache.session_ids()) - {new_sid})
            clients[c] = (new_sid, 1) if new_sid else (0, 0)
        else:
            _, c, adds, forgets, skew = op
            sid, epoch = clients[c]
            if sid == 0:
                continue
            session = cache.get(sid)
            ctx = cache.new_context(V, sid, epoch + skew, [fd("t", i) for i in adds], [("t", i) for i in forgets])
            if session is None:
                assert ctx.error_code == NOT_FOUND
                clients[c] = (0, 0)
                continue
            if skew:
                assert ctx.error_code == BAD_EPOCH and cache.get(sid) is session
                continue
            if type(ctx) is SessionlessFetchContext:  # the request emptied the session: answered sessionless
                assert cache.get(sid) is None
                reads = to_read(ctx)
                assert ctx.build_response({(t, p): res(2) for t, p, *_ in reads})[0] == 0
                closed += 1
                clients[c] = (0, 0)
                continue
            reads = to_read(ctx)
            assert [(t, p) for t, p, *_ in reads] == list(session.partitions)
            rsid, out = ctx.build_response({(t, p): res(2) for t, p, *_ in reads})
            assert rsid == sid and set(keys(out)) <= set(session.partitions)
            clients[c] = (sid, next_epoch(epoch))
        # invariants
        live = cache.session_ids()
        assert len(live) == len(set(live)) == cache.num_sessions <= slots
        for shard in cache.shards:
            assert len(shard.sessions) <= shard.capacity
            assert all(shard.id_low <= s < shard.id_high and s > 0 for s in shard.sessions)
        assert cache.num_partitions_cached == sum(len(cache.get(s).partitions) for s in live)



@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slots=st.integers(1, 5), n_clients=st.integers(1, 8), waits=st.lists(st.integers(0, 700), min_size=20,
                                                                             max_size=20))
def test_evictions_are_exactly_the_sessions_that_vanished_unasked(slots, n_clients, waits):
    clock = Clock()
    cache = FetchSessionCache(slots, 1000, clock=clock, rng=random.Random(0), num_shards=1)
    clients = [ModelClient({("t", i): 0}) for i in range(n_clients)]
    logs = {("t", i): ModelLog([10]) for i in range(n_clients)}
    created = 0
    for i, w in enumerate(waits):
        clock.advance_ms(w)
        c = clients[i % n_clients]
        was = c.sid
        c.round(cache, logs)
        if c.sid and c.sid != was:
            created += 1
    # no client closes its own session here: every session created and gone was evicted
    assert cache.evictions_total == created - cache.num_sessions


# ---------------------------------------------------------------------------------------------------------------------
# topic ids (Fetch v13+, KIP-516)

def test_a_session_by_topic_id_resolves_an_id_once_a_topic_has_it():
    import uuid
    cache, _ = make()
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    ctx = cache.new_context(13, 0, INITIAL_EPOCH, [fd(a, 0), fd(b, 0)], [], names={a: "ta"})
    assert ctx.partitions_to_read() == [(a, 0, 0, 100, "ta"), (b, 0, 0, 100, None)]
    # the answer's order makes the session's: b (refused before any read) after a
    sid, out = ctx.build_response({(a, 0): res(10), (b, 0): res(-1, lso=-1, error=100)})
    assert sid and cache.get(sid).uses_topic_ids and keys(out) == [(a, 0), (b, 0)]
    ctx = cache.new_context(13, sid, 1, [], [], names={a: "ta", b: "tb"})
    assert ctx.partitions_to_read() == [(a, 0, 0, 100, "ta"), (b, 0, 0, 100, "tb")]
    ctx.build_response({(a, 0): res(10), (b, 0): res(10)})
    # a name once resolved stays with the session's partition, whatever the id names later (Kafka's
    # maybeResolveUnknownName only fills a missing name)
    ctx = cache.new_context(13, sid, 2, [], [], names={})
    assert [x[4] for x in ctx.partitions_to_read()] == ["ta", "tb"]
    ctx.build_response({(a, 0): res(10), (b, 0): res(10)})
    # a request before v13 cannot continue it (FETCH_SESSION_TOPIC_ID_ERROR), and the session stays
    bad = cache.new_context(12, sid, 3, [], [])
    assert type(bad) is SessionErrorContext and bad.error_code == 106 and cache.get(sid) is not None
    assert cache.new_context(13, sid, 3, [], [], names={}).error_code == 0


def test_a_session_by_name_is_not_continued_by_ids():
    cache, _ = make()
    _, sid, _ = full(cache, [fd("foo", 0)])
    assert not cache.get(sid).uses_topic_ids
    assert cache.new_context(13, sid, 1, [], [], names={}).error_code == 106
    # checked after the epoch, as Kafka does: a wrong epoch is 71 whatever the version
    assert cache.new_context(13, sid, 5, [], [], names={}).error_code == BAD_EPOCH
    assert cache.new_context(V, sid, 1, [], []).error_code == 0
