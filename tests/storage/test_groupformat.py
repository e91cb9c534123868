"""Golden bytes of the group coordinator's records: values written by Apache Kafka 4.4.0's coordinator (read from its
``__consumer_offsets`` in the lab: a static member's cooperative-sticky group, a KIP-848 group with one member and
a classic member of a KIP-848 group),
decoded here and encoded back byte for byte; keys, tombstone-free round trips and refusals of bytes that are not
a record."""

from __future__ import annotations

import uuid

import pytest

from kafkalog.storage import groupformat as gf

TOPIC = uuid.UUID(bytes=bytes.fromhex("6fd36ae28d90418285f5a81abbb0e10d"))
MEMBER = "inst-1-1f08dd99-ddd2-4336-8a33-11f2f1c95aff"

# GroupMetadataValue v3 after the leader's SyncGroup: one static member, its subscription and assignment
KAFKA_GROUP_METADATA = bytes.fromhex(
    "00030008636f6e73756d6572000000010012636f6f70657261746976652d737469636b79002b696e73742d312d31663038646439392d"
    "646464322d343333362d386133332d313166326631633935616666000001a21b1d88bb00000001002b696e73742d312d3166303864"
    "6439392d646464322d343333362d386133332d3131663266316339356166660006696e73742d3100077265636f726473000a2f3132"
    "372e302e302e3100002710000027100000001f0000000000010013746573742d6462672d742d3830306634386331ffffffff000000"
    "2b0000000000010013746573742d6462672d742d3830306634386331000000020000000000000001ffffffff")
# the same group's first record: created Empty by the static member's join, generation 0
KAFKA_GROUP_METADATA_EMPTY = bytes.fromhex("0003000000000000ffffffff000001a21b1d887e00000000")
KAFKA_CG_METADATA = bytes.fromhex("000000000002010008ab602c898e553ffa")
KAFKA_CG_METADATA_NO_HASH = bytes.fromhex("00000000000300")
KAFKA_MEMBER_METADATA = bytes.fromhex(
    "00000000087265636f7264730b2f3132372e302e302e310214746573742d6462672d742d383030663438633101000075300001000100")
KAFKA_TARGET_METADATA = bytes.fromhex("000000000002010008000001a21b1d8956")
KAFKA_TARGET_MEMBER = bytes.fromhex("0000026fd36ae28d90418285f5a81abbb0e10d0300000000000000010000")
KAFKA_CURRENT = bytes.fromhex(
    "0000000000020000000000026fd36ae28d90418285f5a81abbb0e10d0300000000000000010100090300000002000000020100")


def test_kafkas_group_metadata_decodes_and_encodes_back():
    g = gf.decode_group_metadata_value(KAFKA_GROUP_METADATA)
    assert (g.protocol_type, g.generation, g.protocol, g.leader) == ("consumer", 1, "cooperative-sticky", MEMBER)
    [m] = g.members
    assert (m.member_id, m.instance_id, m.client_id, m.client_host) == (MEMBER, "inst-1", "records", "/127.0.0.1")
    assert (m.rebalance_timeout_ms, m.session_timeout_ms) == (10000, 10000)
    assert gf.encode_group_metadata_value(g) == KAFKA_GROUP_METADATA
    e = gf.decode_group_metadata_value(KAFKA_GROUP_METADATA_EMPTY)
    assert (e.protocol_type, e.generation, e.protocol, e.leader, e.members) == ("", 0, None, None, [])
    assert gf.encode_group_metadata_value(e) == KAFKA_GROUP_METADATA_EMPTY


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_every_version_round_trips(version):
    m = gf.ClassicMemberRecord("m-1", "i" if version >= 3 else None, "c", "/h", 5000 if version >= 1 else -1, 6000,
                               b"\x00sub", b"")
    g = gf.ClassicGroupRecord("connect", 7, "sessioned", "m-1", 123 if version >= 2 else -1, [m, m._replace(
        member_id="m-2")])
    data = gf.encode_group_metadata_value(g, version)
    assert data[:2] == version.to_bytes(2, "big")
    assert gf.decode_group_metadata_value(data) == g


def test_kafkas_consumer_group_records_decode_and_encode_back():
    assert gf.decode_epoch_value(KAFKA_CG_METADATA) == (2, 0xab602c898e553ffa - (1 << 64))
    assert gf.encode_consumer_group_metadata(*gf.decode_epoch_value(KAFKA_CG_METADATA)) == KAFKA_CG_METADATA
    assert gf.decode_epoch_value(KAFKA_CG_METADATA_NO_HASH) == (3, 0)
    assert gf.encode_consumer_group_metadata(3) == KAFKA_CG_METADATA_NO_HASH
    assert gf.encode_target_metadata(*gf.decode_epoch_value(KAFKA_TARGET_METADATA)) == KAFKA_TARGET_METADATA
    d = gf.decode_member_metadata(KAFKA_MEMBER_METADATA)
    assert d == {"instance_id": None, "rack_id": None, "client_id": "records", "client_host": "/127.0.0.1",
                 "topic_names": ["test-dbg-t-800f48c1"], "topic_regex": None, "rebalance_timeout_ms": 30000,
                 "server_assignor": None, "classic": None}
    assert gf.encode_member_metadata(**d) == KAFKA_MEMBER_METADATA
    assert gf.decode_target_member(KAFKA_TARGET_MEMBER) == {TOPIC: {0, 1}}
    assert gf.encode_target_member({TOPIC: {1, 0}}) == KAFKA_TARGET_MEMBER
    c = gf.decode_current_assignment(KAFKA_CURRENT)
    assert c == {"epoch": 2, "previous_epoch": 0, "state": "STABLE", "assigned": {TOPIC: {0, 1}}, "pending": {},
                 "assigned_at": {(TOPIC, 0): 2, (TOPIC, 1): 2}}
    assert gf.encode_current_assignment(**c) == KAFKA_CURRENT


def test_keys():
    k = gf.encode_group_key(gf.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert k.hex() == "0008" "0001" "67" "0001" "6d"
    assert gf.decode_group_key(k) == (8, "g", "m")
    assert gf.encode_group_key(gf.GROUP_METADATA, "g").hex() == "0002" "0001" "67"
    assert gf.decode_group_key(gf.encode_group_key(gf.CONSUMER_GROUP_METADATA, "g")) == (3, "g", None)
    with pytest.raises(ValueError):
        gf.encode_group_key(gf.CONSUMER_GROUP_MEMBER_METADATA, "g")


@pytest.mark.parametrize("decode, data", [
    (gf.decode_group_metadata_value, KAFKA_GROUP_METADATA[:-3]),
    (gf.decode_group_metadata_value, b"\x00\x09" + KAFKA_GROUP_METADATA[2:]),
    (gf.decode_group_metadata_value, KAFKA_GROUP_METADATA + b"\x00"),
    (gf.decode_current_assignment, KAFKA_CURRENT[:-1]),
    (gf.decode_current_assignment, b"\x00\x01" + KAFKA_CURRENT[2:]),
    (gf.decode_member_metadata, KAFKA_MEMBER_METADATA[:10]),
    (gf.decode_target_member, b"\x00"),
    (gf.decode_group_key, b"\x00\x05\x00\x01g"),
])
def test_bytes_that_are_not_a_record_are_refused(decode, data):
    with pytest.raises(ValueError):
        decode(data)


# ConsumerGroupMemberMetadataValue of a classic member of a consumer group (KIP-848's online migration: a range
# consumer upgraded into it; its session timeout 10000 and its JoinGroup's protocol, subscription to topic "t")
KAFKA_CLASSIC_MEMBER_METADATA = bytes.fromhex(
    "00000000087265636f7264730b2f3132372e302e302e3102027401000027100001001c0100002710020672616e67650e0000000000010001"
    "74ffffffff0000")


def test_kafkas_classic_member_metadata_decodes_and_encodes_back():
    d = gf.decode_member_metadata(KAFKA_CLASSIC_MEMBER_METADATA)
    subscription = bytes.fromhex("000000000001000174ffffffff")  # ConsumerProtocolSubscription v0, topics ["t"]
    assert d == {"instance_id": None, "rack_id": None, "client_id": "records", "client_host": "/127.0.0.1",
                 "topic_names": ["t"], "topic_regex": None, "rebalance_timeout_ms": 10000, "server_assignor": None,
                 "classic": (10000, [("range", subscription)])}
    assert gf.encode_member_metadata(**d) == KAFKA_CLASSIC_MEMBER_METADATA


def test_a_classic_members_metadata_round_trips():
    """ClassicMemberMetadata (KIP-848's online migration: a member of a consumer group that uses the classic
    protocol): the tagged nullable struct, a presence byte 1 before SessionTimeoutMs and SupportedProtocols."""
    classic = (45000, [("range", b"\x00\x00sub"), ("cooperative-sticky", b"")])
    data = gf.encode_member_metadata(instance_id=None, rack_id=None, client_id="c", client_host="/h",
                                     topic_names=["t"], topic_regex=None, rebalance_timeout_ms=300000,
                                     server_assignor=None, classic=classic)
    tag = bytes.fromhex("01" "0000afc8" "03" "0672616e6765" "06" "00007375 62" "00"
                        "13" "636f6f70657261746976652d737469636b79" "01" "00" "00")
    assert data.endswith(bytes([1, 0, len(tag)]) + tag), data.hex()
    d = gf.decode_member_metadata(data)
    assert d["classic"] == classic and d["topic_names"] == ["t"] and d["rebalance_timeout_ms"] == 300000
    assert gf.encode_member_metadata(**d) == data
