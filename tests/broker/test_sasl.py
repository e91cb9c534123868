"""SASL (PLAIN, SCRAM-SHA-256/512) and ACLs with real clients over loopback (issue 5, item 3): wrong passwords are
rejected, nothing but ApiVersions/SaslHandshake/SaslAuthenticate is served before authentication, and an
unauthorized DeleteRecords answers TOPIC_AUTHORIZATION_FAILED (29) with every record still there (seed 001: DELETE
on TOPIC), while an authorized one works."""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from kafkalog.broker import Broker, security

from .wire import Wire, batch

kafka = pytest.importorskip("kafka")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("sasl") / "data"
    data.mkdir()
    users_path, acls_path = security.default_paths(data)
    users = security.CredentialStore(users_path)
    for name, pw in PASSWORDS.items():
        users.add_user(name, pw)
    acls = security.Authorizer(acls_path)
    for op in ("READ", "WRITE", "DESCRIBE", "CREATE"):
        acls.add(security.AclBinding("User:alice", "*", op, "TOPIC", "t", "LITERAL", "ALLOW"))
    acls.add(security.AclBinding("User:alice", "*", "READ", "GROUP", "g", "LITERAL", "ALLOW"))
    acls.add(security.AclBinding("User:bob", "*", "DELETE", "TOPIC", "t", "PREFIXED", "ALLOW"))
    acls.add(security.AclBinding("User:bob", "*", "DESCRIBE", "TOPIC", "*", "LITERAL", "ALLOW"))
    b = Broker(data, listen="SASL_PLAINTEXT://127.0.0.1:0", config={
        "authorizer.class.name": "kafkalog", "super.users": "User:admin", "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": False})
    b.start()
    with Wire(b.port) as w:  # setup as the super user over the wire
        _authenticate_plain(w, "admin", PASSWORDS["admin"])
        assert w.create_topic("t", 1)["error_code"] == 0
        for i in range(10):
            assert w.produce("t", 0, batch([b"r%d" % i]))["error_code"] == 0
    try:
        yield b
    finally:
        b.stop()


def _authenticate_plain(w: Wire, user: str, password: str) -> dict:
    hs = w.call(17, 1, {"mechanism": "PLAIN"})
    assert hs["error_code"] == 0 and "PLAIN" in hs["mechanisms"]
    return w.call(36, 1, {"auth_bytes": b"\0" + user.encode() + b"\0" + password.encode()})


def _kp(b, **kw):
    return dict(bootstrap_servers=b.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                request_timeout_ms=10000, **kw)


def _ck(b, mech, user, pw, **kw):
    return {"bootstrap.servers": b.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mech,
            "sasl.username": user, "sasl.password": pw, **kw}


# ---------------------------------------------------------------------------------------------------- raw protocol

def test_nothing_but_sasl_before_authentication(sasl_broker):
    with Wire(sasl_broker.port) as w:
        assert w.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == 0
        w.send(3, 4, {"topics": None, "allow_auto_topic_creation": False})
        assert w.closed_by_peer()


def test_wrong_password_is_58_and_closes(sasl_broker):
    with Wire(sasl_broker.port) as w:
        r = _authenticate_plain(w, "alice", "nope")
        assert r["error_code"] == 58 and "invalid credentials" in r["error_message"]
        assert w.closed_by_peer()
    with Wire(sasl_broker.port) as w:
        r = _authenticate_plain(w, "mallory", "nope")  # unknown user: the same answer
        assert r["error_code"] == 58
    with Wire(sasl_broker.port) as w:
        assert w.call(17, 1, {"mechanism": "GSSAPI"})["error_code"] == 33


def test_handshake_v0_raw_tokens(sasl_broker):
    with Wire(sasl_broker.port) as w:
        assert w.call(17, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0alice\0" + PASSWORDS["alice"].encode()
        w.send_raw(struct.pack(">i", len(token)) + token)
        assert w.recv_frame() == b""  # PLAIN's (empty) server reply as a bare frame
        md = w.call(3, 4, {"topics": [{"name": "t"}], "allow_auto_topic_creation": False})
        assert md["topics"][0]["error_code"] == 0


def test_batched_requests_answer_each_denial_on_its_own(sasl_broker):
    """FindCoordinator v4+ and OffsetFetch v8+ batch keys and groups: a denied one is its own error, the others are
    answered; a share coordinator key (v6) needs CLUSTER_ACTION first, whose denial fails the whole request (Kafka's
    KafkaApis order); DeleteTopics v6 by id names a denied topic only to whom may describe it."""
    with Wire(sasl_broker.port) as admin:
        _authenticate_plain(admin, "admin", PASSWORDS["admin"])
        assert admin.create_topic("hidden", 1)["error_code"] in (0, 36)
        md = admin.call(3, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": n} for n in ("t", "hidden")],
                                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        ids = {t["name"]: t["topic_id"] for t in md["topics"]}
    with Wire(sasl_broker.port) as w:
        _authenticate_plain(w, "alice", PASSWORDS["alice"])
        r = w.call(10, 4, {"key_type": 0, "coordinator_keys": ["g", "other", "g"]})
        assert [(c["key"], c["error_code"], c["node_id"] >= 0, c["error_message"]) for c in r["coordinators"]] == [
            ("g", 0, True, ""), ("other", 30, False, ""), ("g", 0, True, "")]
        r = w.call(10, 5, {"key_type": 1, "coordinator_keys": ["tx"]})
        assert r["coordinators"][0]["error_code"] == 53
        r = w.call(10, 6, {"key_type": 2, "coordinator_keys": ["g:AAAAAAAAAAAAAAAAAAAAAA:0", "x"]})
        assert [(c["error_code"], c["error_message"]) for c in r["coordinators"]] == [
            (31, "Cluster authorization failed.")] * 2
        r = w.call(10, 3, {"key": "other", "key_type": 0})
        assert (r["error_code"], r["error_message"], r["node_id"]) == (30, "Group authorization failed.", -1)
        r = w.call(9, 8, {"groups": [
            {"group_id": "g", "topics": [{"name": "hidden", "partition_indexes": [0]},
                                         {"name": "t", "partition_indexes": [0]}]},
            {"group_id": "other", "topics": None}], "require_stable": False})
        g, other = r["groups"]
        assert (g["error_code"], [(t["name"], t["partitions"][0]["error_code"]) for t in g["topics"]]) == (
            0, [("t", 0), ("hidden", 29)])  # the denied topic after the others, as Kafka answers
        assert (other["error_code"], other["topics"]) == (30, [])
        r = w.call(9, 10, {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": [
            {"topic_id": ids["hidden"], "partition_indexes": [0]}, {"topic_id": uuid.uuid4(), "partition_indexes": [0]},
            {"topic_id": ids["t"], "partition_indexes": [0]}]}], "require_stable": False})
        assert [(t["topic_id"], t["partitions"][0]["error_code"]) for t in r["groups"][0]["topics"]][0] == (ids["t"], 0)
        assert sorted(t["partitions"][0]["error_code"] for t in r["groups"][0]["topics"]) == [0, 29, 100]
        r = w.call(20, 6, {"timeout_ms": 5000, "topics": [{"name": None, "topic_id": ids["t"]},
                                                          {"name": None, "topic_id": ids["hidden"]}]})
        assert [(x["name"], x["error_code"], x["error_message"]) for x in r["responses"]] == [
            ("t", 29, "Topic authorization failed."), (None, 29, "Topic authorization failed.")]
    with Wire(sasl_broker.port) as admin:  # nothing was deleted
        _authenticate_plain(admin, "admin", PASSWORDS["admin"])
        md = admin.call(3, 13, {"topics": [{"topic_id": tid, "name": None} for tid in ids.values()],
                                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert sorted(t["error_code"] for t in md["topics"]) == [0, 0] and md["error_code"] == 0


# ---------------------------------------------------------------------------------------------------- real clients

@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_authenticates_produces_and_consumes(sasl_broker, mech):
    p = kafka.KafkaProducer(**_kp(sasl_broker, sasl_mechanism=mech, sasl_plain_username="alice",
                                  sasl_plain_password=PASSWORDS["alice"]))
    try:
        md = p.send("t", b"from-" + mech.encode()).get(timeout=20)
    finally:
        p.close()
    c = kafka.KafkaConsumer(**_kp(sasl_broker, sasl_mechanism=mech, sasl_plain_username="alice",
                                  sasl_plain_password=PASSWORDS["alice"], consumer_timeout_ms=5000))
    try:
        tp = kafka.TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, md.offset)
        got = next(iter(c))
        assert got.value == b"from-" + mech.encode()
    finally:
        c.close()


def test_kafka_python_wrong_password_is_rejected(sasl_broker, caplog):
    with pytest.raises(kafka.errors.KafkaError):
        p = kafka.KafkaProducer(**_kp(sasl_broker, sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                                      sasl_plain_password="wrong", max_block_ms=3000,
                                      reconnect_backoff_max_ms=300, api_version=(2, 3)))
        p.send("t", b"x").get(timeout=10)
    refused = [r for r in caplog.records if r.name == "kafkalog.broker" and "authentication from" in r.getMessage()
               and "invalid credentials" in r.getMessage()]
    assert refused, "the broker never refused the client's credentials"


def test_kafka_python_unauthorized_topic(sasl_broker):
    p = kafka.KafkaProducer(**_kp(sasl_broker, sasl_mechanism="PLAIN", sasl_plain_username="bob",
                                  sasl_plain_password=PASSWORDS["bob"], max_block_ms=5000, acks=1,
                                  enable_idempotence=False))
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            p.send("t", b"bob may not write").get(timeout=10)
    finally:
        p.close()


def _low_high(b, mech="SCRAM-SHA-512"):
    c = ck.Consumer(_ck(b, mech, "admin", PASSWORDS["admin"], **{"group.id": "probe"}))
    try:
        return c.get_watermark_offsets(ck.TopicPartition("t", 0), timeout=10)
    finally:
        c.close()


def test_confluent_delete_records_needs_delete_on_topic(sasl_broker):
    low, high = _low_high(sasl_broker)
    # alice: no DELETE on t -> 29, and every record is still there
    a = AdminClient(_ck(sasl_broker, "SCRAM-SHA-512", "alice", PASSWORDS["alice"]))
    fut = a.delete_records([ck.TopicPartition("t", 0, 5)])[ck.TopicPartition("t", 0, 5)]
    with pytest.raises(ck.KafkaException) as e:
        fut.result(timeout=20)
    assert e.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _low_high(sasl_broker) == (low, high)
    # bob: DELETE on the prefix "t" -> works, the log start offset moves
    b = AdminClient(_ck(sasl_broker, "SCRAM-SHA-256", "bob", PASSWORDS["bob"]))
    res = b.delete_records([ck.TopicPartition("t", 0, low + 2)])[ck.TopicPartition("t", 0, low + 2)].result(timeout=20)
    assert res.low_watermark == low + 2
    assert _low_high(sasl_broker) == (low + 2, high)


def test_kafka_python_delete_records_authorization(sasl_broker):
    low, high = _low_high(sasl_broker)
    adm = kafka.KafkaAdminClient(**_kp(sasl_broker, sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                                       sasl_plain_password=PASSWORDS["alice"]))
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            adm.delete_records({kafka.TopicPartition("t", 0): high})
    finally:
        adm.close()
    assert _low_high(sasl_broker) == (low, high)


def test_confluent_wrong_password_is_rejected(sasl_broker):
    errors = []
    p = ck.Producer(_ck(sasl_broker, "PLAIN", "alice", "wrong", **{"error_cb": errors.append,
                                                                     "message.timeout.ms": 3000}))
    p.produce("t", b"never")
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    p.flush(5)
    assert any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors), errors


def test_confluent_group_consumer_with_acls(sasl_broker):
    c = ck.Consumer(_ck(sasl_broker, "SCRAM-SHA-256", "alice", PASSWORDS["alice"],
                        **{"group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "session.timeout.ms": 6000}))
    try:
        c.subscribe(["t"])
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                msg = m
        assert msg is not None
        c.commit(message=msg, asynchronous=False)
        assert c.committed([ck.TopicPartition("t", 0)], timeout=10)[0].offset == msg.offset() + 1
    finally:
        c.close()
    # another group: alice has no READ on it
    c = ck.Consumer(_ck(sasl_broker, "SCRAM-SHA-256", "alice", PASSWORDS["alice"],
                        **{"group.id": "other", "auto.offset.reset": "earliest"}))
    try:
        c.subscribe(["t"])
        err = None
        deadline = time.monotonic() + 20
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error():
                err = m.error()
        assert err is not None and err.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_sasl_ssl_listener_with_a_user_certificate(tmp_path):
    import shutil
    import subprocess
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    data = tmp_path / "data"
    data.mkdir()
    security.CredentialStore(security.default_paths(data)[0]).add_user("tls", "tls-secret")
    with Broker(data, listen="SASL_SSL://127.0.0.1:0", config={
            "ssl.keystore.location": str(cert), "ssl.key.location": str(key)}) as b:
        p = ck.Producer({"bootstrap.servers": b.bootstrap_servers, "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(cert), "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "tls",
                         "sasl.password": "tls-secret"})
        p.produce("secure", b"over tls")
        assert p.flush(20) == 0
        c = kafka.KafkaConsumer(bootstrap_servers=b.bootstrap_servers, security_protocol="SASL_SSL",
                                ssl_cafile=str(cert), sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="tls",
                                sasl_plain_password="tls-secret", auto_offset_reset="earliest",
                                consumer_timeout_ms=10000)
        try:
            c.subscribe(["secure"])
            assert next(iter(c)).value == b"over tls"
        finally:
            c.close()
        with Wire(b.port) as w:  # plaintext bytes on a TLS port: the handshake fails, the connection closes
            w.send_raw(b"\x00\x00\x00\x0a" + b"\x00" * 10)
            assert w.closed_by_peer()


def test_replica_admin_apis_need_the_cluster(sasl_broker):
    """ElectLeaders and AlterPartitionReassignments need ALTER on the cluster, ListPartitionReassignments DESCRIBE:
    a user without them gets CLUSTER_AUTHORIZATION_FAILED (31) and nothing else; the super user gets the answers."""
    for user, want in (("alice", 31), ("admin", 0)):
        with Wire(sasl_broker.port) as w:
            _authenticate_plain(w, user, PASSWORDS[user])
            r = w.call(43, 2, {"election_type": 0, "timeout_ms": 5000,
                               "topic_partitions": [{"topic": "t", "partitions": [0]}]})
            assert r["error_code"] == want and \
                [p["error_code"] for p in r["replica_election_results"][0]["partition_result"]] == [want or 84], r
            r = w.call(43, 2, {"election_type": 0, "timeout_ms": 5000, "topic_partitions": None})
            assert r["error_code"] == want and (r["replica_election_results"] == []) == bool(want), r
            r = w.call(45, 1, {"timeout_ms": 5000, "allow_replication_factor_change": True, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "replicas": None}]}]})
            assert (r["error_code"], len(r["responses"])) == ((31, 0) if want else (0, 1)), r
            r = w.call(46, 0, {"timeout_ms": 5000, "topics": None})
            assert (r["error_code"], r["topics"]) == (want, []), r
