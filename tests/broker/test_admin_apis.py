"""The broker's admin APIs on the wire (kafkalog.broker.admin): groups, configs, partitions, cluster, log dirs, ACLs
and SCRAM users, each with Kafka's error codes, ACL checks and persistence across a restart. Raw frames (``Wire``)
so every error code is seen as sent; the same APIs against Apache Kafka itself are compared in tests/compat.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid

import pytest

from kafkalog.broker import Broker, protocol, security

from .wire import Wire, batch

GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC = 69, 68, 86
INVALID_PARTITIONS, INVALID_CONFIG, UNKNOWN_TOPIC = 37, 40, 3
SECURITY_DISABLED, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 54, 91, 92, 93
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = 29, 30, 31


def _commit(w: Wire, group: str, topic: str, offsets: dict) -> dict:
    return w.call(8, 3, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                         "retention_time_ms": -1, "topics": [{"name": topic, "partitions": [
                             {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                             for p, o in offsets.items()]}]})


def _join(w: Wire, group: str, topic: str) -> dict:
    """A member of ``group`` subscribed to ``topic`` (KIP-394 two-step join, then SyncGroup)."""
    meta = protocol.encode_subscription([topic])
    body = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": meta}]}
    r = w.call(11, 5, body)
    if r["error_code"] == 79:
        body["member_id"] = r["member_id"]
        r = w.call(11, 5, body)
    assert r["error_code"] == 0, r
    s = w.call(14, 3, {"group_id": group, "generation_id": r["generation_id"], "member_id": r["member_id"],
                       "group_instance_id": None, "assignments": []})
    assert s["error_code"] == 0, s
    return r


def _groups(w: Wire, version: int = 4, states=()) -> dict:
    r = w.call(16, version, {"states_filter": list(states), "types_filter": []})
    assert r["error_code"] == 0
    return {g["group_id"]: g for g in r["groups"]}


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_groups_are_listed_described_and_deleted_as_kafka_does(broker, topic_name, version):
    t, g_offsets, g_members = topic_name("t"), topic_name("offsets-only"), topic_name("joined")
    with Wire(broker.port) as w, Wire(broker.port) as member:
        assert w.create_topic(t, 2)["error_code"] == 0
        assert _commit(w, g_offsets, t, {0: 5})["topics"][0]["partitions"][0]["error_code"] == 0
        joined = _join(member, g_members, t)
        listed = _groups(w, version)
        # a group that only committed (a simple consumer, an admin tool) has protocol type "", as in Kafka
        assert listed[g_offsets]["protocol_type"] == ""
        assert listed[g_members]["protocol_type"] == "consumer"
        if version >= 4:
            assert listed[g_offsets]["group_state"] == "Empty" and listed[g_members]["group_state"] == "Stable"
            assert g_members in _groups(w, version, ["Stable"]) and g_offsets not in _groups(w, version, ["stable"])
        d = {x["group_id"]: x for x in w.call(15, min(version, 5), {"groups": [g_members, g_offsets, "nobody"],
                                                                    "include_authorized_operations": True})["groups"]}
        assert d[g_members]["group_state"] == "Stable" and d[g_members]["protocol_data"] == "range"
        (m,) = d[g_members]["members"]
        assert m["member_id"] == joined["member_id"] and m["client_host"] == "/127.0.0.1"
        assert protocol.decode_subscription(m["member_metadata"])["topics"] == [t]
        assert protocol.decode_assignment(m["member_assignment"])["assigned_partitions"] == {t: [0, 1]}
        assert d[g_offsets]["group_state"] == "Empty" and d[g_offsets]["members"] == []
        assert d["nobody"]["group_state"] == "Dead" and d["nobody"]["error_code"] == 0

        # DeleteGroups: a live group is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND, an empty one goes
        r = {x["group_id"]: x["error_code"] for x in w.call(42, 2, {"groups_names": [g_members, g_offsets, "nobody"]})
             ["results"]}
        assert r == {g_members: NON_EMPTY_GROUP, g_offsets: 0, "nobody": GROUP_ID_NOT_FOUND}
        fetched = w.call(9, 3, {"group_id": g_offsets, "topics": [{"name": t, "partition_indexes": [0]}]})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == -1
        assert g_offsets not in _groups(w, version)
        # the member leaves: its group is empty and can be deleted, and is then gone from the listing
        assert member.call(13, 1, {"group_id": g_members, "member_id": joined["member_id"]})["error_code"] == 0
        assert w.call(42, 0, {"groups_names": [g_members]})["results"][0]["error_code"] == 0
        assert g_members not in _groups(w, version)


def test_offset_delete_refuses_a_subscribed_topic_and_deletes_the_rest(broker, topic_name):
    t, other, g = topic_name("t"), topic_name("other"), topic_name("g")
    with Wire(broker.port) as w, Wire(broker.port) as member:
        assert w.create_topic(t, 1)["error_code"] == 0 and w.create_topic(other, 2)["error_code"] == 0
        _commit(w, g, t, {0: 3})
        _commit(w, g, other, {0: 4, 1: 5})
        _join(member, g, t)
        r = w.call(47, 0, {"group_id": g, "topics": [{"name": t, "partitions": [{"partition_index": 0}]},
                                                     {"name": other, "partitions": [{"partition_index": 1},
                                                                                    {"partition_index": 7}]}]})
        assert r["error_code"] == 0
        codes = {(x["name"], p["partition_index"]): p["error_code"] for x in r["topics"] for p in x["partitions"]}
        assert codes == {(t, 0): GROUP_SUBSCRIBED_TO_TOPIC, (other, 1): 0, (other, 7): UNKNOWN_TOPIC}
        left = w.call(9, 3, {"group_id": g, "topics": None})
        have = {(x["name"], p["partition_index"]): p["committed_offset"]
                for x in left["topics"] for p in x["partitions"]}
        assert have == {(t, 0): 3, (other, 0): 4}
        assert w.call(47, 0, {"group_id": "no-such-group", "topics": []})["error_code"] == GROUP_ID_NOT_FOUND


def test_offset_delete_beside_a_member_whose_subscription_cannot_be_read(broker, topic_name):
    """Found by the 1,000,000-frame fuzz run: a member joined with protocol metadata that is not a subscription
    (JoinGroup takes it as opaque bytes) made every OffsetDelete of its group close the connection. Kafka's classic
    group takes an unreadable consumer subscription as subscribed to every topic: GROUP_SUBSCRIBED_TO_TOPIC."""
    t, g = topic_name("t"), topic_name("g")
    with Wire(broker.port) as w, Wire(broker.port) as member:
        assert w.create_topic(t, 1)["error_code"] == 0
        _commit(w, g, t, {0: 3})
        body = {"group_id": g, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "custom-assignor", "metadata": bytes.fromhex("03c2ffffffff00")}]}
        r = member.call(11, 5, body)
        if r["error_code"] == 79:
            body["member_id"] = r["member_id"]
            r = member.call(11, 5, body)
        assert r["error_code"] == 0, r
        s = member.call(14, 3, {"group_id": g, "generation_id": r["generation_id"], "member_id": r["member_id"],
                                "group_instance_id": None, "assignments": []})
        assert s["error_code"] == 0, s
        r = w.call(47, 0, {"group_id": g, "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]})
        assert (r["error_code"], r["topics"][0]["partitions"][0]["error_code"]) == (0, GROUP_SUBSCRIBED_TO_TOPIC)
        left = w.call(9, 3, {"group_id": g, "topics": None})  # the connection still serves, nothing was deleted
        assert [(p["partition_index"], p["committed_offset"]) for x in left["topics"] for p in x["partitions"]] == \
            [(0, 3)]


def test_create_partitions_grows_a_topic_that_survives_a_restart(own_broker, topic_name):
    t = topic_name()
    with Wire(own_broker.port) as w:
        assert w.create_topic(t, 2)["error_code"] == 0
        assert w.produce(t, 1, batch([b"a", b"b"]))["error_code"] == 0

        def grow(count, validate_only=False, assignments=None):
            return w.call(37, 3, {"topics": [{"name": t, "count": count, "assignments": assignments}],
                                  "timeout_ms": 5000, "validate_only": validate_only})["results"][0]
        assert grow(5, validate_only=True)["error_code"] == 0
        assert len(w.call(3, 4, {"topics": [{"name": t}], "allow_auto_topic_creation": False})["topics"][0]
                   ["partitions"]) == 2
        shrink = grow(1)
        assert shrink["error_code"] == INVALID_PARTITIONS and "higher than the requested 1" in shrink["error_message"]
        assert grow(2)["error_code"] == INVALID_PARTITIONS
        assert grow(4, assignments=[{"broker_ids": [99]}, {"broker_ids": [99]}])["error_code"] == 39
        assert grow(4)["error_code"] == 0
        assert w.produce(t, 3, batch([b"new"]))["base_offset"] == 0
        unknown = w.call(37, 0, {"topics": [{"name": "nope-" + t, "count": 3, "assignments": None}],
                                 "timeout_ms": 5000, "validate_only": False})["results"][0]
        assert unknown["error_code"] == UNKNOWN_TOPIC
    own_broker.restart()
    with Wire(own_broker.port) as w:
        parts = w.call(3, 4, {"topics": [{"name": t}], "allow_auto_topic_creation": False})["topics"][0]["partitions"]
        assert [p["partition_index"] for p in parts] == [0, 1, 2, 3]
        assert w.fetch(t, 1, 0)["high_watermark"] == 2
        assert w.fetch(t, 3, 0)["high_watermark"] == 1


def _configs(w: Wire, name: str, rtype: int = 2, keys=None, version: int = 4) -> dict:
    r = w.call(32, version, {"resources": [{"resource_type": rtype, "resource_name": name,
                                            "configuration_keys": keys}],
                             "include_synonyms": True, "include_documentation": True})["results"][0]
    assert r["error_code"] == 0, r
    return {c["name"]: c for c in r["configs"]}


def test_configs_are_described_altered_and_applied_to_the_log(own_broker, topic_name):
    t = topic_name()
    with Wire(own_broker.port) as w:
        assert w.create_topic(t, 1, {"cleanup.policy": "delete"})["error_code"] == 0
        c = _configs(w, t)
        assert c["retention.ms"]["value"] == "604800000" and c["retention.ms"]["config_source"] == 5  # DEFAULT_CONFIG
        assert c["retention.ms"]["config_type"] == 5 and c["retention.ms"]["documentation"]  # LONG
        assert c["cleanup.policy"]["config_source"] == 1  # DYNAMIC_TOPIC_CONFIG
        assert c["retention.ms"]["synonyms"] == []  # as Kafka: log.retention.ms has no default of its own
        assert [(s["name"], s["source"]) for s in c["max.message.bytes"]["synonyms"]] == [
            ("message.max.bytes", 5)]
        assert set(_configs(w, t, keys=["segment.bytes"])) == {"segment.bytes"}

        def incremental(*ops, validate_only=False):
            return w.call(44, 1, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [
                {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
                "validate_only": validate_only})["responses"][0]
        assert incremental(("retention.ms", 0, "1000"), ("cleanup.policy", 2, "compact"))["error_code"] == 0
        c = _configs(w, t)
        assert c["retention.ms"]["value"] == "1000" and c["cleanup.policy"]["value"] == "delete,compact"
        assert incremental(("cleanup.policy", 3, "compact"), ("retention.ms", 1, None))["error_code"] == 0
        c = _configs(w, t)
        assert c["retention.ms"]["value"] == "604800000" and c["cleanup.policy"]["value"] == "delete"
        bad = incremental(("retention.ms", 0, "soon"))
        assert bad["error_code"] == INVALID_CONFIG and "retention.ms" in bad["error_message"]
        assert incremental(("no.such.key", 0, "1"))["error_code"] == INVALID_CONFIG
        assert incremental(("retention.bytes", 0, "5"), validate_only=True)["error_code"] == 0
        assert _configs(w, t)["retention.bytes"]["value"] == "-1"
        # AlterConfigs (not incremental) replaces the whole set of overrides, as Kafka's does
        r = w.call(33, 2, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [
            {"name": "segment.ms", "value": "3600000"}]}], "validate_only": False})["responses"][0]
        assert r["error_code"] == 0
        c = _configs(w, t)
        assert c["segment.ms"]["value"] == "3600000" and c["cleanup.policy"]["config_source"] == 5
        # the broker's own configuration is read-only here: described, and a change is refused naming the key
        b = _configs(w, str(own_broker._broker.services.node_id), rtype=4)
        assert b["num.partitions"]["value"] == "1"
        # as Kafka lists them: the hours key holds the default, the ms and minutes keys are null until set
        assert b["log.retention.hours"]["value"] == "168" and b["log.retention.ms"]["value"] is None
        refused = w.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "num.partitions", "config_operation": 0, "value": "3"}]}], "validate_only": False})
        assert refused["responses"][0]["error_code"] == INVALID_CONFIG
        assert "num.partitions" in refused["responses"][0]["error_message"]
        unknown = w.call(32, 1, {"resources": [{"resource_type": 2, "resource_name": "nope-" + t,
                                                "configuration_keys": None}], "include_synonyms": False})
        assert unknown["results"][0]["error_code"] == UNKNOWN_TOPIC
        # retention applied to the running log: a 1 ms retention removes the old segment at the next maintenance
        assert incremental(("segment.bytes", 0, "1048576"))["error_code"] == 0
    own_broker.restart()
    with Wire(own_broker.port) as w:
        assert _configs(w, t)["segment.ms"]["value"] == "3600000"


def test_describe_topic_partitions_pages_and_reports_a_stable_topic_id(own_broker, topic_name):
    a, b = sorted([topic_name("a"), topic_name("b")])
    with Wire(own_broker.port) as w:
        assert w.create_topic(a, 3)["error_code"] == 0 and w.create_topic(b, 2)["error_code"] == 0
        first = w.call(75, 0, {"topics": [{"name": a}, {"name": b}], "response_partition_limit": 4, "cursor": None})
        ta, tb = first["topics"]
        assert [p["partition_index"] for p in ta["partitions"]] == [0, 1, 2]
        assert [p["partition_index"] for p in tb["partitions"]] == [0]
        assert first["next_cursor"] == {"topic_name": b, "partition_index": 1}
        rest = w.call(75, 0, {"topics": [{"name": a}, {"name": b}], "response_partition_limit": 4,
                              "cursor": first["next_cursor"]})
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in rest["topics"]] == [(b, [1])]
        assert rest["next_cursor"] is None
        assert ta["topic_id"] != uuid.UUID(int=0) and ta["topic_id"] != tb["topic_id"]
        missing = w.call(75, 0, {"topics": [{"name": "nope-" + a}], "response_partition_limit": 10, "cursor": None})
        assert missing["topics"][0]["error_code"] == UNKNOWN_TOPIC
    # Kafka's partition.metadata names the same id, and it survives a restart
    text = (own_broker.data_dir / f"{a}-2" / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {base64.urlsafe_b64encode(ta['topic_id'].bytes).rstrip(b'=').decode()}\n"
    own_broker.restart()
    with Wire(own_broker.port) as w:
        again = w.call(75, 0, {"topics": [{"name": a}], "response_partition_limit": 10, "cursor": None})
        assert again["topics"][0]["topic_id"] == ta["topic_id"]


def test_describe_cluster_and_log_dirs(broker, topic_name):
    t = topic_name()
    with Wire(broker.port) as w:
        assert w.create_topic(t, 2)["error_code"] == 0
        assert w.produce(t, 1, batch([b"x" * 1000]))["error_code"] == 0
        c = w.call(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        # (v2's is_fenced is absent from a v1 answer: the decoder gives it its default)
        assert c["error_code"] == 0 and c["brokers"] == [{"broker_id": c["controller_id"], "host": "127.0.0.1",
                                                          "port": broker.port, "rack": None, "is_fenced": False}]
        assert c["cluster_authorized_operations"] & (1 << 8)  # DESCRIBE
        assert w.call(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})["error_code"] == 114
        d = w.call(35, 4, {"topics": [{"topic": t, "partitions": [0, 1]}]})
        (res,) = d["results"]
        assert res["log_dir"] == str(broker.data_dir) and res["total_bytes"] > res["usable_bytes"] > 0
        sizes = {p["partition_index"]: p["partition_size"] for p in res["topics"][0]["partitions"]}
        assert sizes[0] == 0 and sizes[1] > 1000


def test_acl_and_scram_apis_answer_security_disabled_without_an_authorizer(broker):
    with Wire(broker.port) as w:
        r = w.call(29, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert r["error_code"] == SECURITY_DISABLED and "Authorizer" in r["error_message"]
        r = w.call(30, 3, {"creations": [{"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                                          "principal": "User:x", "host": "*", "operation": 3, "permission_type": 3}]})
        assert r["results"][0]["error_code"] == SECURITY_DISABLED


def _salted(mech: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac({"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mech], password.encode(), salt,
                               iterations)


def _authenticate_scram(w: Wire, user: str, password: str, mech: str = "SCRAM-SHA-256") -> int:
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mech]
    assert w.call(17, 1, {"mechanism": mech})["error_code"] == 0
    nonce = "n0nce"
    first_bare = f"n={user},r={nonce}"
    r = w.call(36, 1, {"auth_bytes": ("n,," + first_bare).encode()})
    if r["error_code"]:
        return r["error_code"]
    server_first = bytes(r["auth_bytes"]).decode()
    f = dict(x.split("=", 1) for x in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(h, password.encode(), base64.b64decode(f["s"]), int(f["i"]))
    client_key = hmac.digest(salted, b"Client Key", h)
    without_proof = f"c=biws,r={f['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.digest(hashlib.new(h, client_key).digest(), auth, h)))
    r = w.call(36, 1, {"auth_bytes": f"{without_proof},p={base64.b64encode(proof).decode()}".encode()})
    return r["error_code"]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A SASL broker with kafkalog's authorizer: admin is a super user, mallory has no ACL."""
    data = tmp_path_factory.mktemp("secured") / "data"
    data.mkdir()
    users_path, _ = security.default_paths(data)
    store = security.CredentialStore(users_path)
    store.add_user("admin", "admin-secret")
    store.add_user("mallory", "mallory-secret")
    b = Broker(data, listen="SASL_PLAINTEXT://127.0.0.1:0", config={
        "authorizer.class.name": "kafkalog", "super.users": "User:admin", "group.initial.rebalance.delay.ms": 0})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _as(b, user: str, password: str) -> Wire:
    w = Wire(b.port)
    assert _authenticate_scram(w, user, password) == 0
    return w


def test_acls_are_created_described_deleted_and_enforced(secured):
    admin = _as(secured, "admin", "admin-secret")
    mallory = _as(secured, "mallory", "mallory-secret")
    try:
        topic = "acl-" + uuid.uuid4().hex[:8]
        assert admin.create_topic(topic, 1)["error_code"] == 0
        creation = {"resource_type": 2, "resource_name": topic, "resource_pattern_type": 3, "principal":
                    "User:mallory", "host": "*", "operation": 8, "permission_type": 3}  # DESCRIBE, ALLOW
        # mallory may neither create ACLs nor list them (ALTER / DESCRIBE on the cluster)
        assert mallory.call(30, 3, {"creations": [creation]})["results"][0]["error_code"] == CLUSTER_DENIED
        flt = {"resource_type_filter": 2, "resource_name_filter": topic, "pattern_type_filter": 3,
               "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
        assert mallory.call(29, 3, flt)["error_code"] == CLUSTER_DENIED
        before = mallory.call(3, 4, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        assert before["topics"][0]["error_code"] == TOPIC_DENIED
        bad = dict(creation, operation=3, resource_type=3)  # READ on a group: fine; then an impossible one
        impossible = dict(creation, operation=12)  # IDEMPOTENT_WRITE on a TOPIC is not a topic operation
        r = admin.call(30, 3, {"creations": [creation, bad, impossible]})["results"]
        assert [x["error_code"] for x in r] == [0, 0, 42] and "IDEMPOTENT_WRITE" in r[2]["error_message"]
        d = admin.call(29, 3, flt)
        assert d["error_code"] == 0
        assert [(x["resource_name"], x["pattern_type"], [(a["principal"], a["operation"], a["permission_type"])
                                                         for a in x["acls"]]) for x in d["resources"]] == [
            (topic, 3, [("User:mallory", 8, 3)])]
        after = mallory.call(3, 4, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        assert after["topics"][0]["error_code"] == 0
        # a group ACL was made too (READ on the group named like the topic); delete both by one ANY filter
        gone = admin.call(31, 3, {"filters": [{"resource_type_filter": 1, "resource_name_filter": topic,
                                               "pattern_type_filter": 1, "principal_filter": "User:mallory",
                                               "host_filter": None, "operation": 1, "permission_type": 1}]})
        matched = gone["filter_results"][0]["matching_acls"]
        assert sorted((m["resource_type"], m["operation"]) for m in matched) == [(2, 8), (3, 3)]
        assert admin.call(29, 3, flt)["resources"] == []
        again = mallory.call(3, 4, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        assert again["topics"][0]["error_code"] == TOPIC_DENIED
    finally:
        admin.close()
        mallory.close()


def test_scram_credentials_made_over_the_wire_authenticate(secured):
    user = "carol-" + uuid.uuid4().hex[:6]
    salt, iterations = b"pepper-" + uuid.uuid4().bytes, 8192
    admin = _as(secured, "admin", "admin-secret")
    mallory = _as(secured, "mallory", "mallory-secret")
    try:
        up = {"name": user, "mechanism": 1, "iterations": iterations, "salt": salt,
              "salted_password": _salted("SCRAM-SHA-256", "carol-pw", salt, iterations)}
        denied = mallory.call(51, 0, {"deletions": [], "upsertions": [up]})
        assert denied["results"] == [{"user": user, "error_code": CLUSTER_DENIED,
                                      "error_message": "User:mallory may not alter credentials"}]
        missing = admin.call(50, 0, {"users": [{"name": user}]})["results"][0]
        assert missing["error_code"] == RESOURCE_NOT_FOUND
        r = admin.call(51, 0, {"deletions": [], "upsertions": [up, dict(up, name=user + "-few", iterations=100)]})
        codes = {x["user"]: x["error_code"] for x in r["results"]}
        assert codes == {user: 0, user + "-few": UNACCEPTABLE_CREDENTIAL}
        twice = admin.call(51, 0, {"deletions": [{"name": user, "mechanism": 1}], "upsertions": [up]})
        assert twice["results"][0]["error_code"] == DUPLICATE_RESOURCE
        desc = admin.call(50, 0, {"users": None})
        mine = {x["user"]: x for x in desc["results"]}[user]
        assert mine["credential_infos"] == [{"mechanism": 1, "iterations": iterations}]
        with Wire(secured.port) as w:
            assert _authenticate_scram(w, user, "carol-pw") == 0
        with Wire(secured.port) as w:
            assert _authenticate_scram(w, user, "wrong") == 58
        # deleting the one credential removes the user: it can no longer authenticate
        r = admin.call(51, 0, {"deletions": [{"name": user, "mechanism": 1}], "upsertions": []})
        assert r["results"][0]["error_code"] == 0
        assert admin.call(50, 0, {"users": [{"name": user}]})["results"][0]["error_code"] == RESOURCE_NOT_FOUND
        with Wire(secured.port) as w:
            assert _authenticate_scram(w, user, "carol-pw") == 58
    finally:
        admin.close()
        mallory.close()


def test_group_apis_check_group_acls(secured):
    mallory = _as(secured, "mallory", "mallory-secret")
    admin = _as(secured, "admin", "admin-secret")
    try:
        g = "secret-group-" + uuid.uuid4().hex[:6]
        topic = "acl-" + uuid.uuid4().hex[:8]
        assert admin.create_topic(topic, 1)["error_code"] == 0
        assert _commit(admin, g, topic, {0: 1})["topics"][0]["partitions"][0]["error_code"] == 0
        assert g in _groups(admin) and g not in _groups(mallory)
        d = mallory.call(15, 5, {"groups": [g], "include_authorized_operations": False})["groups"][0]
        assert d["error_code"] == GROUP_DENIED
        assert mallory.call(42, 2, {"groups_names": [g]})["results"][0]["error_code"] == GROUP_DENIED
        assert mallory.call(47, 0, {"group_id": g, "topics": []})["error_code"] == GROUP_DENIED
        assert mallory.call(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                   "configuration_keys": None}], "include_synonyms": False,
                                    "include_documentation": False})["results"][0]["error_code"] == TOPIC_DENIED
        assert mallory.call(37, 3, {"topics": [{"name": topic, "count": 2, "assignments": None}], "timeout_ms": 1000,
                                    "validate_only": False})["results"][0]["error_code"] == TOPIC_DENIED
        assert mallory.call(35, 4, {"topics": None})["error_code"] == CLUSTER_DENIED
        assert admin.call(42, 2, {"groups_names": [g]})["results"][0]["error_code"] == 0
    finally:
        mallory.close()
        admin.close()


def test_every_advertised_api_has_a_handler_and_a_codec():
    from kafkalog.broker.api import ADVERTISED, API_HANDLERS
    for key, (lo, hi) in ADVERTISED.items():
        assert key in API_HANDLERS, protocol.API_NAMES.get(key, key)
        if key != 0:  # Produce advertises 0-7, serves 3-7 (KAFKA-18659)
            assert protocol.SUPPORTED[key][0] <= lo <= hi <= protocol.SUPPORTED[key][1]
