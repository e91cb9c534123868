"""SharePartition (kafkalog/client/share.py) on a real log: its range bookkeeping of who holds what (acquired
ranges, acknowledgements of runs, expiry, a member's release) checked against a plain per-offset model, and the
durable state it leaves checked against the same model after every step (hypothesis)."""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafkalog
from kafkalog.client.queue import _Ranges
from kafkalog.client.share import ACCEPT, GAP, REJECT, RELEASE, RENEW, SharePartition, _Held
from kafkalog.errors import InvalidRecordStateError


def flat(held: _Held) -> dict:
    return {o: (h[2], h[3], h[4], h[5]) for h in held.r for o in range(h[0], h[1])}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "cut", "cover", "take", "within"]), st.integers(0, 60),
                          st.integers(1, 15), st.sampled_from("mn"), st.integers(1, 3)), max_size=40))
def test_held_ranges_match_a_dict_model(ops):
    h, model = _Held(), {}
    for op, a, n, member, d in ops:
        b = a + n
        if op == "add":
            if any(o in model for o in range(a, b)):
                continue
            h.add(a, b, member, d, float(d), float(a))
            model.update((o, (member, d, float(d), float(a))) for o in range(a, b))
        elif op == "cut":
            pieces = h.cut(a, b)
            assert {o: tuple(p[2:]) for p in pieces for o in range(p[0], p[1])} == \
                {o: model.pop(o) for o in range(a, b) if o in model}
        elif op == "cover":
            pieces = h.cover(a, b)
            assert all(x[1] <= y[0] for x, y in zip(pieces, pieces[1:]))
            assert {o: tuple(p[2:]) for p in pieces for o in range(p[0], p[1])} == \
                {o: v for o, v in model.items() if a <= o < b}
        elif op == "take":
            taken = h.take_if(lambda x, member=member: x[2] == member)
            assert {o: tuple(p[2:]) for p in taken for o in range(p[0], p[1])} == \
                {o: model.pop(o) for o in [o for o, v in model.items() if v[0] == member]}
        else:  # within: keep what a lease set [a, b) and [b + 3, b + 3 + n) holds
            leases = _Ranges([[a, b, 1], [b + 3, b + 3 + n, 1]])
            h.within(leases)
            model = {o: v for o, v in model.items() if a <= o < b or b + 3 <= o < b + 3 + n}
        assert flat(h) == model and h.n == len(model) and bool(h) == bool(model)
        assert all(x[0] < x[1] for x in h.r) and all(x[1] <= y[0] for x, y in zip(h.r, h.r[1:]))
        c = h.copy()
        assert flat(c) == model and c.r is not h.r and all(x is not y for x, y in zip(c.r, h.r))


@pytest.fixture
def log(tmp_path):
    store = kafkalog.LogStore(tmp_path / "data")
    store.create_topic("t", partitions=1)
    lg = store.log("t", 0)
    for i in range(6):  # 6 batches of 10 records: offsets 0-59
        lg.append_batch([b"%d" % (i * 10 + j) for j in range(10)])
    yield lg
    store.close()


def state_of(sp: SharePartition):
    """(SPSO, next, redeliveries {offset: count}, this worker's leases {offset: count}) as the state files hold them
    (read afresh by another SharePartition's reader)."""
    st, _ = sp._files.read()
    red = {o: d for s, e, d in st.redeliver.r for o in range(s, e)}
    mine = st.leases.get(sp.worker, _Ranges())
    return st.prefix, st.next, red, {o: d for s, e, d in mine.r for o in range(s, e)}


class Durability:
    """Watches a SharePartition's two state slots: each write must leave the other slot's content on disk (fsynced
    after it was last written), so that a torn write never brings back a state older than an fsynced one; and
    ``acknowledged()`` checks that the state in force is on disk (an answered acknowledgement is durable)."""

    def __init__(self, sp):
        self.files = sp._files
        self.dirty = [False, False]
        self.wrote = None
        write, sync = self.files.write, self.files.sync

        def checked_write(st):
            i = st.seq % 2
            assert not self.dirty[1 - i], f"state {st.seq} written over slot {i} while slot {1 - i} is not on disk"
            write(st)
            self.dirty[i], self.wrote = True, i

        def checked_sync(i):
            sync(i)
            self.dirty[i] = False
        self.files.write, self.files.sync = checked_write, checked_sync

    def acknowledged(self):
        assert self.wrote is None or not self.dirty[self.wrote], "an acknowledgement answered before its fsync"


LIMIT = 2  # low: records reach their last attempt (delivered alone) and the limit (archived) often


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["acquire", "acquire", "ack", "ack", "ack_mixed", "ack_any", "release",
                                               "expire", "sync_behind", "ack_acquire", "ack_acquire"]),
                              st.sampled_from("mn"), st.integers(0, 59), st.integers(1, 25),
                              st.sampled_from([ACCEPT, RELEASE, REJECT, GAP, RENEW])), min_size=1, max_size=25))
def test_share_partition_matches_a_per_offset_model(tmp_path_factory, ops):
    """Every offset is available (with its count), held by a member (with its count) or done; acquisitions,
    acknowledgements of runs (one type or one per offset), a member's release and expiry keep the state files and
    the in-memory holders equal to that model, and an acknowledgement of anything a member does not hold fully
    changes nothing. Every state write leaves the other slot on disk, and an acknowledgement returns with its state
    on disk, whether or not the acquisitions' states were fsynced behind them (sync_behind)."""
    store = kafkalog.LogStore(tmp_path_factory.mktemp("share") / "data")
    store.create_topic("t", partitions=1)
    lg = store.log("t", 0)
    for i in range(6):
        lg.append_batch([b"%d" % (i * 10 + j) for j in range(10)])
    sp = SharePartition(lg, "g", "earliest")
    disk = Durability(sp)
    avail = {}  # offset -> count, offsets delivered before and given back (new ones: >= nxt)
    held = {}  # offset -> (member, count)
    nxt = 0
    try:
        def took(got, member):
            # the model: lowest available first (a record on its last attempt alone), then new whole batches
            nonlocal nxt
            offs = {o: c for f, la, c in got for o in range(f, la + 1)}
            for o, c in offs.items():
                assert o not in held
                if o < nxt:
                    assert avail.pop(o) + 1 == c
                else:
                    assert c == 1
                held[o] = (member, c)
            nxt = max([nxt, *(o + 1 for o in offs if o >= nxt)])
            assert nxt % 10 == 0 or nxt == 60

        for op, member, a, n, t in ops:
            b = min(a + n, 60)
            if op == "acquire":
                took(sp.acquire(member, n, 30000, LIMIT), member)
            elif op in ("ack", "ack_mixed", "ack_any", "ack_acquire"):
                mine = sorted(o for o, (m, _) in held.items() if m == member)
                if op != "ack_any" and mine:  # a run the member holds, from its a-th held offset on
                    a = b = mine[a % len(mine)]
                    while b in mine and b < a + n:
                        b += 1
                types = [t] if op != "ack_mixed" else [(ACCEPT, RELEASE, REJECT)[o % 3] for o in range(a, b)]
                ok = a < nxt and all(held.get(o, ("",))[0] == member for o in range(a, b))
                error = None
                if op == "ack_acquire":  # one state write: the acknowledgement, then the acquisition
                    error, got = sp.acknowledge_and_acquire(member, [(a, b - 1, types)], LIMIT, True, 30000, n)
                else:
                    try:
                        sp.acknowledge(member, [(a, b - 1, types)], LIMIT, renew_ok=True)
                    except (InvalidRecordStateError, kafkalog.errors.InvalidRequestError) as e:
                        error = e
                if isinstance(error, InvalidRecordStateError):
                    assert not ok
                elif error is not None:
                    assert isinstance(error, kafkalog.errors.InvalidRequestError) and a >= nxt
                else:
                    assert ok
                    if set(types) != {RENEW}:  # a renewal settles nothing: nothing to make durable
                        disk.acknowledged()
                    for o in range(a, b):
                        typ = types[0] if len(types) == 1 else types[o - a]
                        if typ == RENEW:
                            continue
                        m, c = held.pop(o)
                        if typ == RELEASE and c < LIMIT:
                            avail[o] = c
                if op == "ack_acquire":
                    took(got, member)
            elif op == "sync_behind":
                sp.sync_behind()
            elif op == "release":
                sp.release_member(member, LIMIT)
                for o in [o for o, (m, _) in held.items() if m == member]:
                    c = held.pop(o)[1]
                    if c < LIMIT:
                        avail[o] = c
            else:
                for h in sp.acquired.r:
                    h[4] = time.monotonic() - 1 if h[2] == member else h[4]
                sp.expire(LIMIT)
                for o in [o for o, (m, _) in held.items() if m == member]:
                    c = held.pop(o)[1]
                    if c < LIMIT:
                        avail[o] = c
            assert {o: (h[2], h[3]) for h in sp.acquired.r for o in range(h[0], h[1])} == held
            prefix, snext, red, mine = state_of(sp)
            assert snext == nxt and red == avail and mine == {o: c for o, (_, c) in held.items()}
            assert prefix == min([nxt, *avail, *held])
    finally:
        sp.close()
        store.close()


def test_acknowledging_a_run_partly_held_changes_nothing(log):
    sp = SharePartition(log, "g", "earliest")
    try:
        assert sp.acquire("m", 5, 30000, 5) == [(0, 9, 1)]  # the whole first batch
        assert sp.acquire("n", 5, 30000, 5) == [(10, 19, 1)]
        before = state_of(sp)
        for first, last in ((5, 12), (8, 10), (0, 20), (19, 19)):
            with pytest.raises(InvalidRecordStateError):
                sp.acknowledge("m", [(0, 1, [ACCEPT]), (first, last, [ACCEPT])], 5)
        assert state_of(sp) == before and sp.held_by("m") == 10 and sp.held_by("n") == 10
        sp.acknowledge("m", [(0, 9, [ACCEPT] * 3 + [RELEASE] * 4 + [REJECT] * 3)], 5)
        assert state_of(sp) == (3, 20, {3: 1, 4: 1, 5: 1, 6: 1}, {o: 1 for o in range(10, 20)})
        assert sp.acquire("n", 100, 30000, 5)[0] == (3, 6, 2)
    finally:
        sp.close()
