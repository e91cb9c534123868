"""KIP-932 share groups over raw frames (wire.py): membership, the share-partition state machine, share sessions
and their errors, and the share-partition being the DurableQueue's state (the same group on the same data).

Every test is a handful of round trips on a broker of its own (the broker keys a test needs: a short acquisition
lock, a low delivery limit); the kill -9 test runs ``kafkalog serve`` as a child and kills it holding acquired and
accepted records. Bounded by counts (polls), never by wall time.
"""

from __future__ import annotations

import queue
import signal
import uuid

import pytest

from kafkalog.broker import Broker
from kafkalog.client.queue import DurableQueue

from .conftest import Serve
from .wire import Wire, batch

pytestmark = pytest.mark.usefixtures("deadline")

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
INVALID_REQUEST, UNKNOWN_MEMBER_ID, GROUP_MAX_SIZE_REACHED, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 42, 25, 81, 68, 69
FENCED_MEMBER_EPOCH, INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 110, 121, 122, 123
POLLS = 200


@pytest.fixture
def make_broker(tmp_path):
    started = []

    def _make(**config):
        b = Broker(tmp_path / f"data{len(started)}", "127.0.0.1:0",
                   {"share.auto.offset.reset": "earliest", **config}).start()
        started.append(b)
        return b
    yield _make
    for b in started:
        b.stop()


class Member:
    """One share-group member over its own connection: heartbeat, ShareFetch and ShareAcknowledge with the session
    epoch kept as a Java client keeps it."""

    def __init__(self, port: int, group: str, topic: str, member_id: str | None = None):
        self.w = Wire(port)
        self.group, self.topic = group, topic
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0  # member epoch
        self.session = 0  # the share session epoch of the next request
        self.topic_id = None

    def heartbeat(self, epoch=None, topics="same", member_id=None):
        r = self.w.call(76, 1, {"group_id": self.group, "member_id": self.member_id if member_id is None else member_id,
                                "member_epoch": self.epoch if epoch is None else epoch, "rack_id": None,
                                "subscribed_topic_names": [self.topic] if topics == "same" else topics})
        if r["error_code"] == 0:
            self.epoch = r["member_epoch"]
            if r["assignment"] and r["assignment"]["topic_partitions"]:
                self.topic_id = r["assignment"]["topic_partitions"][0]["topic_id"]
        return r

    def join(self):
        r = self.heartbeat(0)
        assert r["error_code"] == 0, r
        return r

    def fetch(self, acks=None, partitions=(0,), max_records=500, wait=0, version=2, epoch=None, mode=0, renew=False):
        body = {"group_id": self.group, "member_id": self.member_id,
                "share_session_epoch": self.session if epoch is None else epoch, "max_wait_ms": wait, "min_bytes": 1,
                "max_bytes": 1 << 20, "max_records": max_records, "batch_size": max_records,
                "share_acquire_mode": mode, "is_renew_ack": renew,
                "topics": [{"topic_id": self.topic_id, "partitions": [
                    {"partition_index": p, "acknowledgement_batches": _batches((acks or {}).get(p, ()))}
                    for p in partitions]}], "forgotten_topics_data": []}
        r = self.w.call(78, version, body)
        if r["error_code"] == 0 and epoch is None:
            self.session = -1 if self.session == -1 else self.session + 1
        return r

    def acknowledge(self, acks, version=2, epoch=None, renew=False):
        body = {"group_id": self.group, "member_id": self.member_id,
                "share_session_epoch": self.session if epoch is None else epoch, "is_renew_ack": renew,
                "topics": [{"topic_id": self.topic_id, "partitions": [
                    {"partition_index": p, "acknowledgement_batches": _batches(b)} for p, b in acks.items()]}]}
        r = self.w.call(79, version, body)
        if r["error_code"] == 0 and epoch is None:
            self.session += 1
        return r

    def close(self):
        self.w.close()


def _batches(acks):
    """(first, last, types) -> the wire's AcknowledgementBatches."""
    return [{"first_offset": a, "last_offset": b, "acknowledge_types": list(t)} for a, b, t in acks]


def acquired(resp, partition=0):
    """[(first, last, delivery count)] a ShareFetch answer acquired on ``partition``."""
    for t in resp["responses"]:
        for p in t["partitions"]:
            if p["partition_index"] == partition:
                return [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in p["acquired_records"]]
    return []


def part(resp, partition=0):
    for t in resp["responses"]:
        for p in t["partitions"]:
            if p["partition_index"] == partition:
                return p
    raise AssertionError(f"no partition {partition} in {resp}")


def setup_topic(port, topic, batches, partitions=1):
    with Wire(port) as w:
        assert w.create_topic(topic, partitions)["error_code"] == 0
        for p, values in batches:
            assert w.produce(topic, p, batch(values))["error_code"] == 0


# ---------------------------------------------------------------------------------------------------- ApiVersions

def test_share_apis_advertised_with_share_version(make_broker):
    on = make_broker()
    off = make_broker(**{"share.version": 0})
    with Wire(on.port) as w:
        r = w.call(18, 4, {"client_software_name": "t", "client_software_version": "1"})
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
        assert (keys[76], keys[77], keys[78], keys[79]) == ((1, 1), (1, 1), (1, 2), (1, 2))
        assert {"name": "share.version", "min_version": 0, "max_version": 1} in r["supported_features"]
        assert {f["name"]: f["max_version_level"] for f in r["finalized_features"]}["share.version"] == 1
    assert_share_apis_refused(off.port)


def assert_share_apis_refused(port):
    """share.version 0: the share APIs stay listed and each is answered UNSUPPORTED_VERSION (35) and nothing else,
    as Kafka 4.4 answers after kafka-features downgrade --feature share.version=0 (checked in the lab)."""
    with Wire(port) as w:
        r = w.call(18, 4, {"client_software_name": "t", "client_software_version": "1"})
        assert {76, 77, 78, 79, 90} <= {k["api_key"] for k in r["api_keys"]}
        assert "share.version" not in {f["name"] for f in r["finalized_features"]}
        r = w.call(76, 1, {"group_id": "g", "member_id": str(uuid.uuid4()), "member_epoch": 0, "rack_id": None,
                           "subscribed_topic_names": ["t"]})
        assert (r["error_code"], r["member_id"], r["assignment"]) == (35, None, None), r
        r = w.call(77, 1, {"group_ids": ["g"], "include_authorized_operations": False})
        assert [(g["error_code"], g["members"]) for g in r["groups"]] == [(35, [])], r
        fetch = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                 "share_acquire_mode": 0, "forgotten_topics_data": []}
        for key in (78, 79):
            body = {"group_id": "g", "member_id": str(uuid.uuid4()), "share_session_epoch": 0, "is_renew_ack": False,
                    "topics": [], **(fetch if key == 78 else {})}
            r = w.call(key, 2, body)
            assert (r["error_code"], r["responses"], r["acquisition_lock_timeout_ms"]) == (35, [], 0), (key, r)
        r = w.call(90, 1, {"groups": [{"group_id": "g", "topics": None}]})
        assert [(g["error_code"], g["topics"]) for g in r["groups"]] == [(35, [])], r


# ---------------------------------------------------------------------------------------------------- membership

def test_heartbeat_membership_and_errors(make_broker):
    b = make_broker(**{"group.share.max.size": 2})
    setup_topic(b.port, "t", [], partitions=3)
    ids = sorted(str(uuid.uuid4()) for _ in range(2))  # the assignor goes by member id
    a, c = Member(b.port, "g", "t", ids[0]), Member(b.port, "g", "t", ids[1])
    ra = a.join()
    assert ra["member_epoch"] == 1 and ra["assignment"]["topic_partitions"][0]["partitions"] == [0, 1, 2]
    assert ra["heartbeat_interval_ms"] == 5000
    rc = c.join()
    # the simple assignor (as Kafka 4.4 answers): fewer members than partitions split them, in member id order
    assert rc["member_epoch"] == 2 and rc["assignment"]["topic_partitions"][0]["partitions"] == [2]
    steady = a.heartbeat()
    assert steady["error_code"] == 0 and steady["member_epoch"] == 2  # a's epoch follows the group's
    assert steady["assignment"]["topic_partitions"][0]["partitions"] == [0, 1]
    assert a.heartbeat()["assignment"] is None  # nothing new: no assignment sent
    # errors
    assert a.heartbeat(epoch=7)["error_code"] == FENCED_MEMBER_EPOCH
    assert a.heartbeat(epoch=3, member_id=str(uuid.uuid4()))["error_code"] == UNKNOWN_MEMBER_ID
    r = a.heartbeat(epoch=0, member_id="")
    assert (r["error_code"], r["error_message"]) == (INVALID_REQUEST, None)  # no message, as Kafka 4.4
    r = a.heartbeat(epoch=0, member_id=" ")
    assert (r["error_code"], r["error_message"]) == (INVALID_REQUEST, "MemberId can't be empty.")
    assert a.heartbeat(epoch=0, member_id="a" * 37)["error_code"] == INVALID_REQUEST
    r = a.heartbeat(epoch=0, member_id=str(uuid.uuid4()), topics=None)
    assert (r["error_code"], r["error_message"]) == (INVALID_REQUEST, "SubscribedTopicNames must be set in first "
                                                                      "request.")
    assert a.heartbeat(epoch=0, member_id=str(uuid.uuid4()))["error_code"] == GROUP_MAX_SIZE_REACHED
    with Wire(b.port) as w:
        d = w.call(77, 1, {"group_ids": ["g", "nope"], "include_authorized_operations": False})["groups"]
        assert (d[0]["group_state"], d[0]["assignor_name"], len(d[0]["members"])) == ("Stable", "simple", 2)
        assert {m["member_id"] for m in d[0]["members"]} == {a.member_id, c.member_id}
        assert d[0]["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == "t"
        assert (d[1]["error_code"], d[1]["error_message"]) == (GROUP_ID_NOT_FOUND, "Group nope not found.")
        listed = w.call(16, 5, {"states_filter": [], "types_filter": ["share"]})["groups"]
        assert listed == [{"group_id": "g", "protocol_type": "share", "group_state": "Stable", "group_type": "share"}]
        assert w.call(16, 5, {"states_filter": [], "types_filter": ["consumer"]})["groups"] == []
        dg = w.call(15, 6, {"groups": ["g"], "include_authorized_operations": False})["groups"][0]
        assert (dg["error_code"], dg["error_message"]) == (GROUP_ID_NOT_FOUND, "Group g is not a classic group.")
        assert w.call(42, 2, {"groups_names": ["g"]})["results"][0]["error_code"] == NON_EMPTY_GROUP
        assert a.heartbeat(epoch=-1)["member_epoch"] == -1
        assert c.heartbeat(epoch=-1)["member_epoch"] == -1
        assert w.call(16, 5, {"states_filter": [], "types_filter": ["share"]})["groups"][0]["group_state"] == "Empty"
        assert w.call(42, 2, {"groups_names": ["g"]})["results"][0]["error_code"] == 0
        assert w.call(16, 5, {"states_filter": [], "types_filter": ["share"]})["groups"] == []


# ---------------------------------------------------------------------------------------------------- the state machine

def test_acquire_whole_batches_and_acknowledge_types(make_broker):
    b = make_broker()
    setup_topic(b.port, "t", [(0, [b"a", b"b", b"c"]), (0, [b"d", b"e"])])
    m = Member(b.port, "g", "t")
    m.join()
    r = m.fetch(max_records=1)  # epoch 0 opens the session
    assert acquired(r) == [(0, 2, 1)]  # the whole first batch (batch_optimized: MaxRecords is soft)
    assert r["acquisition_lock_timeout_ms"] == 30000
    assert len(bytes(part(r)["records"])) > 0
    # ACCEPT 0, RELEASE 1, REJECT 2 (one type per offset), piggy-backed; the next batch is acquired with it
    r = m.fetch({0: [(0, 2, (ACCEPT, RELEASE, REJECT))]}, max_records=10)
    assert part(r)["acknowledge_error_code"] == 0
    assert acquired(r) == [(1, 1, 2), (3, 4, 1)]  # the released offset again (count 2), then the new batch
    # acknowledging an offset this member does not hold fails the partition's acknowledgements, all of them
    r = m.acknowledge({0: [(1, 1, (ACCEPT,)), (2, 2, (ACCEPT,))]})
    assert part(r)["error_code"] == INVALID_RECORD_STATE
    # another member cannot settle them either
    o = Member(b.port, "g", "t")
    o.join()
    o.fetch()
    assert part(o.acknowledge({0: [(1, 1, (ACCEPT,))]}))["error_code"] == INVALID_RECORD_STATE
    # RENEW (v2, IsRenewAck) keeps them; v1 has no RENEW
    assert part(m.acknowledge({0: [(1, 1, (RENEW,))]}, renew=True))["error_code"] == 0
    assert part(m.acknowledge({0: [(1, 1, (RENEW,))]}, version=1))["error_code"] == INVALID_REQUEST
    # one type for a range; a gap (an offset without a record) settles too
    assert part(m.acknowledge({0: [(1, 1, (ACCEPT,)), (3, 4, (GAP, ACCEPT))]}))["error_code"] == 0
    assert acquired(o.fetch()) == []  # nothing left: accepted and rejected never come back
    with Wire(b.port) as w:
        assert w.produce("t", 0, batch([b"f"]))["base_offset"] == 5
    assert acquired(o.fetch(wait=5000)) == [(5, 5, 1)]  # a long poll answered by the new record


def test_delivery_count_limit_archives(make_broker):
    b = make_broker(**{"group.share.delivery.count.limit": 2})
    setup_topic(b.port, "t", [(0, [b"a", b"b"])])
    m = Member(b.port, "g", "t")
    m.join()
    assert acquired(m.fetch()) == [(0, 1, 1)]
    # their last delivery attempt: each record is delivered alone
    assert acquired(m.fetch({0: [(0, 1, (RELEASE,))]})) == [(0, 0, 2)]
    assert acquired(m.fetch()) == [(1, 1, 2)]
    r = m.fetch({0: [(0, 1, (RELEASE,))]})
    assert part(r)["acknowledge_error_code"] == 0 and acquired(r) == []  # released at the limit: archived


def test_acquisition_lock_expiry_redelivers(make_broker):
    b = make_broker(**{"group.share.record.lock.duration.ms": 300})
    setup_topic(b.port, "t", [(0, [b"a", b"b", b"c"])])
    m, o = Member(b.port, "g", "t"), Member(b.port, "g", "t")
    m.join()
    o.join()
    r = m.fetch()
    assert acquired(r) == [(0, 2, 1)] and r["acquisition_lock_timeout_ms"] == 300
    assert acquired(o.fetch()) == []
    got = []
    for _ in range(POLLS):  # each poll waits up to 100 ms: the lock expires within a few
        got = acquired(o.fetch(wait=100))
        if got:
            break
    assert got == [(0, 2, 2)]
    # the expired holder's acknowledgement is refused: the records are o's now
    assert part(m.acknowledge({0: [(0, 2, (ACCEPT,))]}))["error_code"] == INVALID_RECORD_STATE


def test_member_session_timeout_releases_its_records(make_broker):
    b = make_broker(**{"group.share.session.timeout.ms": 300})
    setup_topic(b.port, "t", [(0, [b"a", b"b"])])
    m, o = Member(b.port, "g", "t"), Member(b.port, "g", "t")
    m.join()
    assert acquired(m.fetch()) == [(0, 1, 1)]
    o.join()
    got = []
    for _ in range(POLLS):  # o heartbeats (each poll waits up to 100 ms); m, silent, is removed after 300 ms
        assert o.heartbeat(topics=None)["error_code"] == 0
        got = acquired(o.fetch(wait=100))
        if got:
            break
    assert got == [(0, 1, 2)]  # the records the removed member held, well before their 30 s lock
    assert m.heartbeat(topics=None)["error_code"] == UNKNOWN_MEMBER_ID


def test_closed_connection_gives_its_records_back(make_broker):
    """As Kafka 4.4: the share sessions of a connection that ends end with it, and what their members acquired is
    delivered again at once (not after the 30 s lock)."""
    b = make_broker()
    setup_topic(b.port, "t", [(0, [b"a", b"b"])])
    m, o = Member(b.port, "g", "t"), Member(b.port, "g", "t")
    m.join()
    o.join()
    assert acquired(m.fetch()) == [(0, 1, 1)]
    assert acquired(o.fetch()) == []
    m.close()
    got = []
    for _ in range(POLLS):
        got = acquired(o.fetch(wait=100))
        if got:
            break
    assert got == [(0, 1, 2)]


def test_share_session_epochs(make_broker):
    b = make_broker()
    setup_topic(b.port, "t", [(0, [b"a", b"b"])])
    m = Member(b.port, "g", "t")
    m.join()
    r = m.fetch(epoch=3)
    # Kafka answers the session errors with no message and no lock timeout
    assert (r["error_code"], r["error_message"], r["acquisition_lock_timeout_ms"]) == (SHARE_SESSION_NOT_FOUND, None, 0)
    r = m.fetch({0: [(0, 0, (ACCEPT,))]}, epoch=0)
    assert r["error_code"] == INVALID_REQUEST  # acknowledgements in the initial request
    assert acquired(m.fetch()) == [(0, 1, 1)]
    r = m.fetch(epoch=5)
    assert (r["error_code"], r["error_message"]) == (INVALID_SHARE_SESSION_EPOCH, None)
    assert m.acknowledge({0: [(0, 0, (ACCEPT,))]}, epoch=0)["error_code"] == INVALID_SHARE_SESSION_EPOCH
    assert part(m.acknowledge({0: [(0, 0, (ACCEPT,))]}))["error_code"] == 0
    # -1 closes the session after its acknowledgements, and what the member holds goes back
    r = m.acknowledge({}, epoch=-1)
    assert r["error_code"] == 0
    assert m.fetch(epoch=1)["error_code"] == SHARE_SESSION_NOT_FOUND
    o = Member(b.port, "g", "t")
    o.join()
    assert acquired(o.fetch()) == [(1, 1, 2)]


def test_partitions_take_turns_and_max_bytes(make_broker):
    b = make_broker()
    setup_topic(b.port, "t", [(0, [b"%d" % i for i in range(10)]), (1, [b"%d" % i for i in range(10)])], partitions=2)
    m = Member(b.port, "g", "t")
    m.join()
    r = m.fetch(partitions=(0, 1), max_records=5, mode=1)
    assert (acquired(r, 0), acquired(r, 1)) == ([(0, 4, 1)], [])
    r = m.fetch(partitions=(0, 1), max_records=5, mode=1)  # partition 1 is first this time
    assert (acquired(r, 0), acquired(r, 1)) == ([], [(0, 4, 1)])
    body = m.w.call(78, 2, {"group_id": "g", "member_id": m.member_id, "share_session_epoch": m.session,
                            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1, "max_records": 100, "batch_size": 100,
                            "share_acquire_mode": 1, "is_renew_ack": False, "topics": [], "forgotten_topics_data": []})
    # MaxBytes is soft: the first partition with records is answered whole, no other one
    assert [len(acquired(body, p)) for p in (0, 1)] == [1, 0]


def test_acknowledgements_of_another_partition_ride_a_fetch(make_broker):
    """A consumer's ShareFetch acknowledges what it got last time, from the partition it was handed then, while the
    acquisition starts at the next one (partitions take turns): those acknowledgements are applied, each partition's
    answered in its AcknowledgeErrorCode, a refused one changing nothing of the others; an accepted record never
    comes back, a released one does."""
    b = make_broker()
    setup_topic(b.port, "t", [(p, [b"%d" % i for i in range(10)]) for p in range(3)], partitions=3)
    m = Member(b.port, "g", "t")
    m.join()
    everything = (0, 1, 2)
    assert acquired(m.fetch(partitions=everything, max_records=5, mode=1), 0) == [(0, 4, 1)]
    # partition 1's turn: accept 0-2 and release 3-4 of partition 0; partition 2 was never fetched: refused
    r = m.fetch({0: [(0, 2, (ACCEPT,)), (3, 4, (RELEASE,))], 2: [(0, 0, (ACCEPT,))]}, partitions=everything,
                max_records=5, mode=1)
    assert [acquired(r, p) for p in everything] == [[], [(0, 4, 1)], []]
    assert part(r, 0)["acknowledge_error_code"] == 0
    assert part(r, 2)["acknowledge_error_code"] == INVALID_REQUEST
    assert part(r, 1)["acknowledge_error_code"] == 0
    assert acquired(m.fetch(partitions=everything, max_records=5, mode=1), 2) == [(0, 4, 1)]
    # partition 0's turn again: the released two (their second delivery), then new ones; 0-2 never again
    assert acquired(m.fetch(partitions=everything, max_records=5, mode=1), 0) == [(3, 4, 2), (5, 7, 1)]


def test_record_limit_mode_and_max_records(make_broker):
    b = make_broker()
    setup_topic(b.port, "t", [(0, [b"%d" % i for i in range(10)])])
    m = Member(b.port, "g", "t")
    m.join()
    assert acquired(m.fetch(max_records=3, mode=1)) == [(0, 2, 1)]  # record_limit (v2): exactly MaxRecords
    assert acquired(m.fetch(max_records=3)) == [(3, 9, 1)]  # batch_optimized: to the end of the batch


def test_a_fetch_waiting_on_a_partition_at_its_lock_limit_does_not_spin(make_broker, monkeypatch):
    """A long poll on a partition with records past what was acquired, but no room for more acquisition locks,
    waits for offsets to be settled or given back instead of trying to acquire again and again; it acquires as soon
    as the holder's acknowledgement makes room."""
    from kafkalog.client import share
    calls = []
    real = share.SharePartition.acquire

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)
    monkeypatch.setattr(share.SharePartition, "acquire", counted)
    b = make_broker(**{"group.share.partition.max.record.locks": 100})
    setup_topic(b.port, "t", [(0, [b"%d" % i for i in range(100)]), (0, [b"x"] * 10)])
    m, o = Member(b.port, "g", "t"), Member(b.port, "g", "t")
    m.join()
    o.join()
    assert acquired(m.fetch()) == [(0, 99, 1)]  # every lock the partition has
    calls.clear()
    assert acquired(o.fetch(wait=300)) == []
    assert len(calls) <= 10, f"{len(calls)} acquisitions in one 300 ms long poll: spinning"  # 1 + one per 100 ms
    r = m.fetch({0: [(0, 9, (RELEASE,)), (10, 99, (ACCEPT,))]}, wait=0)
    assert part(r)["acknowledge_error_code"] == 0
    assert acquired(r) == [(0, 9, 2), (100, 109, 1)]


def test_a_sessions_partitions_are_opened_at_its_first_fetch(make_broker, tmp_path):
    """The share-partitions a ShareFetch names are all initialized then (off the answer's path), not one per later
    fetch that reaches them (each opening creates and fsyncs a state)."""
    b = make_broker()
    setup_topic(b.port, "t", [(p, [b"x"]) for p in range(3)], partitions=3)
    m = Member(b.port, "g", "t")
    m.join()
    assert acquired(m.fetch(partitions=(0, 1, 2), max_records=1, mode=1)) == [(0, 0, 1)]  # enough: p1, p2 not read
    states = [tmp_path / "data0" / f"t-{p}" / ".kafkalog-queues" / "g" for p in range(3)]
    for _ in range(20 * POLLS):  # heartbeats pace the looks: no ShareFetch reaches p1 or p2
        if all(any((d / f).is_file() and (d / f).stat().st_size for f in ("state.0", "state.1")) for d in states):
            break
        assert m.heartbeat(topics=None)["error_code"] == 0
    else:
        raise AssertionError("the session's other partitions were not initialized")
    r = m.fetch(partitions=(0, 1, 2))
    assert (acquired(r, 1), acquired(r, 2)) == ([(0, 0, 1)], [(0, 0, 1)])


# ------------------------------------------------------------------------------------------------- one state, two faces

def test_share_group_and_durable_queue_are_one_group(make_broker):
    b = make_broker()
    with Wire(b.port) as w:
        assert w.create_topic("jobs", 1)["error_code"] == 0
    q = DurableQueue(b.store, name="jobs", group="g", prefetch=5)
    try:
        assert q.put_many([b"%d" % i for i in range(10)]) == list(range(10))
        m = Member(b.port, "g", "jobs")
        m.join()
        assert acquired(m.fetch(max_records=4, mode=1)) == [(0, 3, 1)]  # the wire member leases 0-3
        got = [q.get(timeout=5) for _ in range(6)]  # the queue worker gets the others, never 0-3
        assert [x.offset for x in got] == [4, 5, 6, 7, 8, 9]
        for x in got:
            q.ack(x)
        # the wire member releases 1 and accepts the rest: the queue worker gets 1 again, delivery count 2
        assert part(m.acknowledge({0: [(0, 3, (ACCEPT, RELEASE, ACCEPT, ACCEPT))]}))["error_code"] == 0
        again = q.get(timeout=5)
        assert (again.offset, again.delivery_count, again.value) == (1, 2, b"1")
        q.ack(again)
        assert q.qsize() == 0
        # and the other way: what the queue worker nacks, the wire member gets
        q.put(b"x")
        x = q.get(timeout=5)
        q.nack(x)
        assert acquired(m.fetch(max_records=10, wait=1000)) == [(10, 10, 2)]
    finally:
        q.close()


def _group_views(port: int, gid: str) -> dict:
    """How the broker shows ``gid``: its ListGroups entry, its ShareGroupDescribe and DescribeGroups v6 answers."""
    with Wire(port) as w:
        listed = [g for g in w.call(16, 5, {"states_filter": [], "types_filter": []})["groups"] if g["group_id"] == gid]
        d = w.call(77, 1, {"group_ids": [gid], "include_authorized_operations": False})["groups"][0]
        c = w.call(15, 6, {"groups": [gid], "include_authorized_operations": False})["groups"][0]
    return {"listed": [(g["group_type"], g["protocol_type"], g["group_state"]) for g in listed],
            "share": (d["error_code"], d["group_state"], len(d["members"])),
            "classic": (c["error_code"], c["error_message"])}


def _states(data, topic: str, gid: str) -> list:
    return sorted(p.parent.parent.name for p in data.glob(f"{topic}-*/.kafkalog-queues/{gid}/state.0"))


SHARE_EMPTY = {"listed": [("share", "share", "Empty")], "share": (0, "Empty", 0),
               "classic": (GROUP_ID_NOT_FOUND, "Group g is not a classic group.")}


def test_a_durable_queue_group_is_a_share_group_over_the_wire(make_broker, tmp_path):
    """A DurableQueue's group that no member ever joined over the wire is a share group to the wire's admin APIs
    (listed, described and deleted as one, not as the classic group its committed offsets would make), and deleting
    it takes its states and offsets; so does deleting one the broker was never asked about before."""
    b = make_broker()
    for gid in ("g", "h"):
        q = DurableQueue(b.store, name="jobs", group=gid, prefetch=5)
        if gid == "g":
            q.put_many([b"%d" % i for i in range(10)])
        q.ack(q.get(timeout=5))
        q.close()  # commits its acked prefix as the group's offset
    assert {"g", "h"} <= set(b.store.offsets.groups())
    with Wire(b.port) as w:  # h first, unseen: not the classic group of its offsets
        assert w.call(42, 2, {"groups_names": ["h"]})["results"][0]["error_code"] == 0
    assert _states(tmp_path / "data0", "jobs", "h") == [] and "h" not in b.store.offsets.groups()
    assert _group_views(b.port, "g") == SHARE_EMPTY
    with Wire(b.port) as w:
        assert w.call(42, 2, {"groups_names": ["g"]})["results"][0]["error_code"] == 0
    assert _states(tmp_path / "data0", "jobs", "g") == [] and "g" not in b.store.offsets.groups()
    assert _group_views(b.port, "g")["listed"] == []


def test_a_share_group_outlives_a_broker_restart(tmp_path):
    """A share group without members is still one after its broker restarts (Kafka keeps it): listed Empty,
    described, what it accepted not delivered again to a member that joins, and deletable with its states."""
    data = tmp_path / "data"
    conf = {"share.auto.offset.reset": "earliest"}
    b = Broker(data, "127.0.0.1:0", conf).start()
    try:
        setup_topic(b.port, "t", [(0, [b"%d" % i for i in range(6)])])
        m = Member(b.port, "g", "t")
        m.join()
        assert acquired(m.fetch(max_records=3, mode=1)) == [(0, 2, 1)]
        assert part(m.acknowledge({0: [(0, 2, (ACCEPT,))]}))["error_code"] == 0
        m.heartbeat(-1)
        m.close()
    finally:
        b.stop()
    b = Broker(data, "127.0.0.1:0", conf).start()
    try:
        assert _group_views(b.port, "g") == SHARE_EMPTY
        m = Member(b.port, "g", "t")
        m.join()
        assert acquired(m.fetch(max_records=10)) == [(3, 5, 1)]
        m.heartbeat(-1)
        m.close()
        with Wire(b.port) as w:
            assert w.call(42, 2, {"groups_names": ["g"]})["results"][0]["error_code"] == 0
        assert _states(data, "t", "g") == []
        assert _group_views(b.port, "g")["listed"] == []
    finally:
        b.stop()


@pytest.mark.parametrize("reaper", ["broker", "queue"])
def test_kill9_accepted_never_come_back_acquired_always_do(tmp_path, child_env, reaper):
    """kill -9 of ``kafkalog serve`` holding 10 acquired records, 5 of them accepted: what was accepted never comes
    back, what was only acquired always does, its delivery count kept, to whoever reaps the dead broker's worker
    first: the restarted broker, or (``queue``) a DurableQueue of the same group opened with no broker running,
    whose close gives them back for the restarted broker (counts never go back)."""
    data = tmp_path / "data"
    args = ["--data-dir", data, "--listen", "127.0.0.1:0", "--override", "share.auto.offset.reset=earliest"]
    s1 = Serve(args, child_env)
    try:
        setup_topic(s1.port, "t", [(0, [b"%d" % i for i in range(10)])])
        m = Member(s1.port, "g", "t")
        m.join()
        assert acquired(m.fetch()) == [(0, 9, 1)]
        assert part(m.acknowledge({0: [(0, 4, (ACCEPT,))]}))["error_code"] == 0  # answered once fsynced
        s1.proc.send_signal(signal.SIGKILL)
        assert s1.proc.wait(30) == -signal.SIGKILL
    finally:
        s1.kill()
    count = 2
    if reaper == "queue":
        q = DurableQueue(data, name="t", group="g")
        try:
            got = [q.get(timeout=5) for _ in range(5)]
            assert [(x.offset, x.delivery_count) for x in got] == [(5, 2), (6, 2), (7, 2), (8, 2), (9, 2)]
            with pytest.raises(queue.Empty):
                q.get(timeout=0)
        finally:
            q.close()
        count = 3
    s2 = Serve(args, child_env)
    try:
        m2 = Member(s2.port, "g", "t")
        m2.join()
        assert acquired(m2.fetch()) == [(5, 9, count)]
    finally:
        s2.kill()


def test_describe_share_group_offsets_and_share_coordinator_key(make_broker):
    b = make_broker()
    setup_topic(b.port, "t", [(0, [b"a", b"b", b"c"]), (0, [b"d", b"e"])], partitions=2)
    m = Member(b.port, "g", "t")
    m.join()
    assert acquired(m.fetch(partitions=(0, 1))) == [(0, 4, 1)]
    assert part(m.acknowledge({0: [(0, 2, (ACCEPT,)), (4, 4, (REJECT,))]}))["error_code"] == 0
    with Wire(b.port) as w:
        r = w.call(90, 1, {"groups": [{"group_id": "g", "topics": None},
                                      {"group_id": "g", "topics": [{"topic_name": "t", "partitions": [1, 7]}]}]})
        every, some = r["groups"]
        # SPSO 3 (0-2 accepted); lag: offset 3 still acquired (4 is archived), partition 1 has no record
        assert [(p["partition_index"], p["start_offset"], p["lag"]) for p in every["topics"][0]["partitions"]] == [
            (0, 3, 1), (1, 0, 0)]
        assert [(p["partition_index"], p["error_code"]) for p in some["topics"][0]["partitions"]] == [(1, 0), (7, 3)]
        assert w.call(90, 0, {"groups": [{"group_id": "g", "topics": None}]})["groups"][0]["topics"][0][
            "partitions"][0].get("lag", -1) == -1  # v0 has no Lag
        tid = m.topic_id
        import base64
        key = "g:" + base64.urlsafe_b64encode(tid.bytes).decode().rstrip("=") + ":0"
        c = w.call(10, 6, {"key_type": 2, "coordinator_keys": [key, "g:nope:0"]})["coordinators"]
        assert [(x["error_code"], x["node_id"]) for x in c] == [(0, b.services.node_id), (INVALID_REQUEST, -1)]


def _assign_simple(n: int, members: dict) -> None:
    """``members`` (id -> partitions) given their new partitions of an ``n``-partition topic, checked balanced."""
    from kafkalog.broker.share_groups import _simple_assignment
    ids = sorted(members)
    for mid, parts in zip(ids, _simple_assignment(n, [members[m] for m in ids])):
        members[mid] = parts
    counts = [len(p) for p in members.values()]
    assert max(counts) - min(counts) <= 1, (n, members)
    sharing = -(-len(members) // n)
    shared = [sum(p in parts for parts in members.values()) for p in range(n)]
    assert all(1 <= c <= sharing for c in shared), (n, shared, members)


def test_the_simple_assignor_is_balanced_and_moves_no_partition_between_members_that_stay():
    """Members join one by one (ids in random order: a new member may sort before the others), then leave one by
    one: each assignment is balanced (counts within one of each other, every partition shared by at least one
    member and at most ceil(members / partitions), as Kafka's, which tolerates a partition short of a sharer when
    the members short of partitions have it already) and sticky: while members are fewer than partitions, a member
    that stays keeps a subset of what it had when one joins and a superset when one leaves; the partitions a member
    gives up go to the newcomer, none to another member that stays. Bounded: 3 topic sizes, 20 members each."""
    import random
    rng = random.Random(848)
    for n in (1, 7, 16):
        members: dict[float, list[int]] = {}
        order = [rng.random() for _ in range(20)]
        for mid in order:
            before = {m: set(p) for m, p in members.items()}
            members[mid] = []
            _assign_simple(n, members)
            if len(members) <= n:
                for m, had in before.items():
                    assert set(members[m]) <= had, (n, m, had, members[m])
        for mid in order:
            del members[mid]
            before = {m: set(p) for m, p in members.items()}
            if members:
                _assign_simple(n, members)
            if len(members) < n:
                for m, had in before.items():
                    assert set(members[m]) >= had, (n, m, had, members[m])
