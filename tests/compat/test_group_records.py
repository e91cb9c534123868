"""The group coordinator's records in ``__consumer_offsets``, differential: the same classic static group, dynamic
range group (kafkalog's group model) and KIP-848 consumer group made over the wire on Apache Kafka 4.4 and on
kafkalog, then each broker's own ``__consumer_offsets`` segment read by Kafka's ``kafka-dump-log --offsets-decoder``
(Kafka's record decoder: every record of kafkalog's must decode without an error), and the latest record per key
compared field by field: GroupMetadata (v3) of the classic groups; ConsumerGroupMetadata, ConsumerGroupMemberMetadata,
ConsumerGroupTargetAssignmentMetadata/Member and ConsumerGroupCurrentMemberAssignment of the consumer group; and the
records of KIP-848's online migration: a classic group upgraded by a consumer-protocol member (its GroupMetadata
tombstoned, its classic member's ClassicMemberMetadata), and one downgraded again (the consumer group's records
tombstoned, the classic group's GroupMetadata).

Member ids are named by role, topic ids by their topic; timestamps and the metadata hash (KIP-1101: Kafka's Murmur3
over its metadata image, kafkalog's own hash: see broker/groupstate.py) are compared by presence only. Cost: the
scenario's requests on both brokers and two kafka-dump-log runs (about 1 s each with the lab's class-data archive).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

from kafkalog.broker import protocol
from kafkalog.storage.offsets import partition_for
from tests.broker.wire import Wire
from tests.compat.lab import kafka_tool
from tests.compat.test_consumer_groups import _assigned, _seen_by_coordinator, hb, join
from tests.compat.test_group_protocols import _coordinator_ready, _join, _port, _sync

TIMESTAMPS = ("currentStateTimestamp", "assignmentTimestamp")


def scenario(target, classic: str, consumer: str, topic: str, ranged: str, migrated=()) -> dict:
    """Both groups made on ``target``; {member id: role, topic id (base64 as dump-log prints it): name}."""
    roles = {}
    with Wire(_port(target), client_id="records") as w:
        _coordinator_ready(w, classic)
        r = w.call(19, 7, {"topics": [{"name": topic, "num_partitions": 2, "replication_factor": 1,
                                       "assignments": [], "configs": []}], "timeout_ms": 30000,
                           "validate_only": False})
        assert r["topics"][0]["error_code"] == 0, r
        roles[base64.urlsafe_b64encode(r["topics"][0]["topic_id"].bytes).decode().rstrip("=")] = topic
        sub = protocol.encode_subscription([topic])
        for _ in range(100):  # Apache Kafka: NOT_COORDINATOR / loading until its partition of the group is loaded
            j = _join(w, 9, classic, "", "consumer", [("cooperative-sticky", sub)], instance_id="inst-1")
            if j["error_code"] not in (14, 15, 16):
                break
            time.sleep(0.1)
        assert j["error_code"] == 0, j
        roles[j["member_id"]] = "S1"
        s = _sync(w, 5, classic, j["generation_id"], j["member_id"],
                  [(j["member_id"], protocol.encode_assignment({topic: [0, 1]}))], instance_id="inst-1",
                  protocol_type="consumer", protocol_name="cooperative-sticky")
        assert s["error_code"] == 0, s
        # a dynamic range member (kafkalog: the group model) as its own leader
        _coordinator_ready(w, ranged)
        j = _join(w, 9, ranged, "", "consumer", [("range", sub)])
        assert j["error_code"] == 79, j
        j = _join(w, 9, ranged, j["member_id"], "consumer", [("range", sub)])
        assert j["error_code"] == 0, j
        roles[j["member_id"]] = "R1"
        s = _sync(w, 5, ranged, j["generation_id"], j["member_id"],
                  [(j["member_id"], protocol.encode_assignment({topic: [0, 1]}))], protocol_type="consumer",
                  protocol_name="range")
        assert s["error_code"] == 0 and s["assignment"] == protocol.encode_assignment({topic: [0, 1]}), s
        _seen_by_coordinator(w, consumer, topic)
        a = str(uuid.uuid4())
        roles[a] = "A"
        r = join(w, consumer, a, [topic])
        for _ in range(50):
            if _assigned(r) and r["member_epoch"] > 0:
                break
            time.sleep(0.1)
            r = hb(w, consumer, a, r["member_epoch"], owned=[])
        assert _assigned(r), r
        owned = [(t, ps) for t, ps in _assigned(r)]
        r = hb(w, consumer, a, r["member_epoch"], owned=owned)
        assert r["error_code"] == 0, r
        if migrated:
            _migrate(w, migrated[0], topic, "range", roles, "C1", downgrade=False)
            _migrate(w, migrated[1], topic, "cooperative-sticky", roles, "C2", downgrade=True)
    return roles


def _migrate(w, group: str, topic: str, assignor: str, roles: dict, role: str, downgrade: bool) -> None:
    """KIP-848's online migration: a classic member alone, a consumer-protocol member B joins (the upgrade), the
    classic member joins again and syncs, B takes its partition; with ``downgrade``, B leaves and the classic member
    leads the classic group again."""
    sub = protocol.encode_subscription([topic])
    _coordinator_ready(w, group)
    j = _join(w, 9, group, "", "consumer", [(assignor, sub)])
    j = _join(w, 9, group, j["member_id"], "consumer", [(assignor, sub)])
    assert j["error_code"] == 0, j
    c = j["member_id"]
    roles[c] = role
    s = _sync(w, 5, group, j["generation_id"], c, [(c, protocol.encode_assignment({topic: [0, 1]}))],
              protocol_type="consumer", protocol_name=assignor)
    assert s["error_code"] == 0, s
    b = str(uuid.uuid4())
    roles[b] = role + "-B"
    r = join(w, group, b, [topic])
    assert r["error_code"] == 0, r
    j = _join(w, 9, group, c, "consumer", [(assignor, sub)])
    assert j["error_code"] == 0, j
    s = _sync(w, 5, group, j["generation_id"], c, protocol_type="consumer", protocol_name=assignor)
    assert s["error_code"] == 0, s
    r = hb(w, group, b, r["member_epoch"], owned=[])
    assert r["error_code"] == 0 and _assigned(r), r
    r = hb(w, group, b, r["member_epoch"], owned=_assigned(r))
    assert r["error_code"] == 0, r
    if downgrade:
        assert hb(w, group, b, -1)["error_code"] == 0
        j = _join(w, 9, group, c, "consumer", [(assignor, sub)])
        assert j["error_code"] == 0 and j["leader"] == c, j
        s = _sync(w, 5, group, j["generation_id"], c, [(c, protocol.encode_assignment({topic: [0, 1]}))],
                  protocol_type="consumer", protocol_name=assignor)
        assert s["error_code"] == 0, s


def group_records(log_dir: Path, groups: set) -> tuple[dict, str]:
    """{(record type, key data as JSON): payload (dict, or None for a tombstone)} of ``groups``, the latest per key,
    as kafka-dump-log --offsets-decoder prints them; and its stderr."""
    parts = sorted(log_dir.glob("__consumer_offsets-*"))
    assert parts, f"no __consumer_offsets in {log_dir}"
    wanted = {log_dir / f"__consumer_offsets-{partition_for(g, len(parts))}" for g in groups}
    files = [str(f) for d in sorted(wanted) for f in sorted(d.glob("*.log"))]
    r = kafka_tool("kafka-dump-log", ["--offsets-decoder", "--files", ",".join(files)], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = {}
    for line in r.stdout.splitlines():
        if not line.startswith("| offset:") or " key: " not in line:
            continue
        key_text, _, payload = line.split(" key: ", 1)[1].partition(" payload: ")
        key = json.loads(key_text)
        data = key["data"]
        if data.get("group", data.get("groupId")) not in groups or key["type"] in ("0", "1"):
            continue
        out[(int(key["type"]), json.dumps(data, sort_keys=True))] = None if payload == "<DELETE>" else \
            json.loads(payload)
    return out, r.stdout + r.stderr


def normalized(records: dict, roles: dict) -> dict:
    def norm(v):
        if isinstance(v, dict):
            return {k: (x is not None and x != 0) if k in TIMESTAMPS or k == "metadataHash" else norm(x)
                    for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, str):
            return roles.get(v, v)
        return v
    return {(t, json.dumps(norm(json.loads(k)), sort_keys=True)): norm(v) for (t, k), v in records.items()}


def test_group_records_decode_with_kafkas_decoder_and_match_kafkas(targets, topic_name, compare):
    classic, consumer, topic, ranged = topic_name("classic"), topic_name("kip848"), topic_name("t"), topic_name("r")
    migrated = (topic_name("upgraded"), topic_name("downgraded"))
    got = {}
    for name, t in targets.items():
        roles = scenario(t, classic, consumer, topic, ranged, migrated)
        records, text = group_records(Path(t.server.log_dir), {classic, consumer, ranged, *migrated})
        assert "Exception" not in text and "Could not" not in text, text[-3000:]
        got[name] = normalized(records, roles)
    types = {name: sorted({t for t, _ in r}) for name, r in got.items()}
    assert types["kafkalog"] == [2, 3, 4, 5, 6, 7, 8], types  # 4: the downgraded group's tombstone only
    compare(sorted(got["kafka"].items()), sorted(got["kafkalog"].items()),
            what="the latest group records per key, as kafka-dump-log --offsets-decoder reads them")
