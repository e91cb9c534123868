"""Fetch v13+ by topic id (KIP-516) on kafkalog's broker, over the wire: ids resolved to topics, an id no topic has
(UNKNOWN_TOPIC_ID), a session's id whose topic was deleted (UNKNOWN_TOPIC_OR_PARTITION) or deleted and made again
under its name (INCONSISTENT_TOPIC_ID), sessions keyed by id across v13 (FETCH_SESSION_TOPIC_ID_ERROR), and a
topic whose id only its partition.metadata holds (a Kafka log dir, an older kafkalog's registry). What Kafka 4.4 answers
to the same requests is checked in tests/compat/test_fetch_produce_versions.py; these are the cases the lab cannot
stage on Kafka (a deleted topic made again at once, a registry without ids). Wire round trips: well under a second."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from kafkalog.broker import Broker

from .wire import Wire, batch

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
INCONSISTENT_TOPIC_ID = 103
FETCH_SESSION_TOPIC_ID_ERROR = 106


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "d", listen="127.0.0.1:0", config={"auto.create.topics.enable": False})
    b.start()
    yield b
    b.stop()


def topic_ids(w: Wire, *names) -> dict:
    md = w.call(3, 12, {"topics": [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names],
                        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert all(t["error_code"] == 0 for t in md["topics"]), md
    return {t["name"]: t["topic_id"] for t in md["topics"]}


def fetch(w: Wire, version: int, parts, session_id=0, epoch=-1, forgotten=()) -> dict:
    """``parts``: [(topic id, partition, offset)]."""
    topics = []
    for tid, p, off in parts:
        if not topics or topics[-1]["topic_id"] != tid:
            topics.append({"topic_id": tid, "partitions": []})
        topics[-1]["partitions"].append({"partition": p, "fetch_offset": off, "partition_max_bytes": 1 << 20})
    return w.call(1, version, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_id": session_id,
                               "session_epoch": epoch, "topics": topics,
                               "forgotten_topics_data": [{"topic_id": t, "partitions": [p]} for t, p in forgotten]})


def answered(resp) -> list:
    """[(topic id, partition, error code, high watermark, records bytes)] in the answer's order."""
    return [(t["topic_id"], p["partition_index"], p["error_code"], p["high_watermark"],
             None if p["records"] is None else len(p["records"]))
            for t in resp["responses"] for p in t["partitions"]]


@pytest.mark.parametrize("version", [13, 15, 17])
def test_fetch_by_topic_id_and_an_id_no_topic_has(broker, version):
    nobody = uuid.uuid4()
    with Wire(broker.port) as w:
        assert w.create_topic("a", 2)["error_code"] == 0
        assert w.create_topic("b")["error_code"] == 0
        w.produce("a", 1, batch([b"1", b"2"]))
        w.produce("b", 0, batch([b"3"]))
        ids = topic_ids(w, "a", "b")
        resp = fetch(w, version, [(ids["a"], 0, 0), (nobody, 5, 0), (ids["a"], 1, 0), (ids["b"], 0, 0)])
    assert resp["error_code"] == 0 and resp["session_id"] == 0
    assert all(t["topic"] == "" for t in resp["responses"])  # v13+: no names on the wire
    got = answered(resp)
    # the partitions read in their order, then the refused ones (Kafka's order): a-0 and a-1, apart in the request,
    # end up next to each other and share one entry
    assert [(t, p, e, h) for t, p, e, h, _ in got] == [
        (ids["a"], 0, 0, 0), (ids["a"], 1, 0, 2), (ids["b"], 0, 0, 1), (nobody, 5, UNKNOWN_TOPIC_ID, -1)]
    assert [n for *_, n in got][1:3] == [len(batch([b"1", b"2"])), len(batch([b"3"]))]
    assert len(resp["responses"]) == 3


def test_a_session_by_topic_id_after_its_topic_is_deleted_and_made_again(broker):
    with Wire(broker.port) as w:
        assert w.create_topic("gone")["error_code"] == 0
        assert w.create_topic("stays")["error_code"] == 0
        ids = topic_ids(w, "gone", "stays")
        first = fetch(w, 13, [(ids["gone"], 0, 0), (ids["stays"], 0, 0)], epoch=0)
        sid = first["session_id"]
        assert sid != 0 and [e for _, _, e, _, _ in answered(first)] == [0, 0]
        assert w.call(20, 3, {"topic_names": ["gone"], "timeout_ms": 5000})["responses"][0]["error_code"] == 0
        # deleted: the session still names it (by id, with the name it had)
        second = fetch(w, 13, [], session_id=sid, epoch=1)
        assert [(t, e) for t, _, e, _, _ in answered(second)] == [(ids["gone"], UNKNOWN_TOPIC_OR_PARTITION)]
        # made again under its name, with another id: the session's id is not that topic's
        assert w.create_topic("gone")["error_code"] == 0
        assert topic_ids(w, "gone")["gone"] != ids["gone"]
        third = fetch(w, 13, [], session_id=sid, epoch=2)
        assert [(t, e) for t, _, e, _, _ in answered(third)] == [(ids["gone"], INCONSISTENT_TOPIC_ID)]
        # the session goes on: forgetting the old id leaves the partition that still reads
        w.produce("stays", 0, batch([b"x"]))
        fourth = fetch(w, 13, [], session_id=sid, epoch=3, forgotten=[(ids["gone"], 0)])
        assert [(t, e, h) for t, _, e, h, _ in answered(fourth)] == [(ids["stays"], 0, 1)]
        assert broker.services.fetch_sessions.get(sid).uses_topic_ids


@pytest.mark.parametrize(("made_at", "continued_at"), [(12, 13), (13, 12)])
def test_a_session_is_continued_only_on_its_side_of_v13(broker, made_at, continued_at):
    with Wire(broker.port) as w:
        assert w.create_topic("t")["error_code"] == 0
        tid = topic_ids(w, "t")["t"]
        body = {"max_wait_ms": 0, "min_bytes": 0, "session_id": 0, "session_epoch": 0, "topics": [
            {"topic": "t", "topic_id": tid, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                            "partition_max_bytes": 1024}]}]}
        sid = w.call(1, made_at, body)["session_id"]
        assert sid != 0
        other = w.call(1, continued_at, dict(body, topics=[], session_id=sid, session_epoch=1))
        assert (other["error_code"], other["session_id"], other["responses"]) == (FETCH_SESSION_TOPIC_ID_ERROR, 0, [])
        same = w.call(1, made_at, dict(body, topics=[], session_id=sid, session_epoch=1))
        assert (same["error_code"], same["session_id"]) == (0, sid)


def test_a_topic_whose_id_only_its_partition_metadata_holds(broker):
    # a topic of a Kafka log dir, or of a kafkalog before topic ids reached the registry: the id is read from the
    # partition's partition.metadata when a fetch names it
    with Wire(broker.port) as w:
        assert w.create_topic("old")["error_code"] == 0
        w.produce("old", 0, batch([b"v"]))
    store = broker.services.store
    tid = store.topic_id("old")
    registry = store.path / ".kafkalog-topics.json"
    topics = json.loads(registry.read_text())
    del topics["old"]["topic_id"]
    registry.write_text(json.dumps(topics))
    assert all(name != "old" for name in store.topics_by_id().values())
    with Wire(broker.port) as w:
        by_id = uuid.UUID(bytes=base64.urlsafe_b64decode(tid + "=="))
        resp = fetch(w, 17, [(by_id, 0, 0)])
    assert [(t, e, h) for t, _, e, h, _ in answered(resp)] == [(by_id, 0, 1)]
