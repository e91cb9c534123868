"""SASL PLAIN/SCRAM server mechanisms, the users file and the ACL authorizer (kafkalog.broker.security).

Oracles: RFC 7677's SCRAM-SHA-256 example byte for byte, and kafka-python's client-side SCRAM and PLAIN mechanisms
driven message by message against our server in-process. No broker is started here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import os
import stat
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import SaslMechanismScram

from kafkalog.broker import security
from kafkalog.broker.security import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    Authorizer,
    CredentialStore,
    SaslServer,
    ScramCredential,
    acls_main,
    users_main,
)
from kafkalog.errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
INVALID_CREDENTIALS = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


@pytest.fixture
def store(tmp_path):
    s = CredentialStore(tmp_path / ".kafkalog-broker" / "users.json")
    s.add_user("alice", "alice-secret")
    return s


# ------------------------------------------------------------------------------------------------ SCRAM: vectors

def test_rfc7677_scram_sha256_example_byte_exact(tmp_path):
    store = CredentialStore(tmp_path / "users.json")
    store.add_user("user", "pencil", ["SCRAM-SHA-256"], salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = SaslServer("SCRAM-SHA-256", store, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")

    server_first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert not server.complete and server.principal is None

    server_final = server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                               b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "User:user"
    with pytest.raises(IllegalSaslStateError) as e:
        server.step(b"n,,n=user,r=again")
    assert e.value.code == 34


def test_credential_string_is_kafkas_and_round_trips():
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pw", 8192, salt=b"0123456789abcdef")
    text = cred.to_string()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_string(text, "SCRAM-SHA-512") == cred
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"0123456789abcdef", 8192)
    assert cred.stored_key == hashlib.sha512(hmac.digest(salted, b"Client Key", "sha512")).digest()
    assert cred.server_key == hmac.digest(salted, b"Server Key", "sha512")
    with pytest.raises(ValueError, match="keys must be 32 bytes"):
        ScramCredential.from_string(text, "SCRAM-SHA-256")


# -------------------------------------------------------------------------------- SCRAM / PLAIN: kafka-python

def kp_scram(user, password, mechanism):
    return SaslMechanismScram(sasl_plain_username=user, sasl_plain_password=password, sasl_mechanism=mechanism)


def drive(client, server):
    """kafka-python's client loop (one SaslAuthenticate per auth_bytes) against our server; returns the steps."""
    steps = 0
    while not client.is_done():
        client.receive(server.step(client.auth_bytes()))
        steps += 1
    return steps


@pytest.mark.parametrize("mechanism", SCRAM)
def test_kafka_python_scram_client_authenticates(store, mechanism):
    server = SaslServer(mechanism, store)
    client = kp_scram("alice", "alice-secret", mechanism)
    assert drive(client, server) == 2  # receive() checked our ServerSignature (it raises on a wrong one)
    assert client.is_authenticated()
    assert server.complete and server.principal == "User:alice"


def test_kafka_python_plain_client_authenticates(store):
    server = SaslServer("PLAIN", store)
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    assert drive(client, server) == 1
    assert client.is_authenticated() and server.complete and server.principal == "User:alice"


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_wrong_password_and_unknown_user_fail_alike(store, mechanism):
    messages = []
    for user, password in (("alice", "wrong"), ("nobody", "alice-secret")):
        server = SaslServer(mechanism, store)
        client = kp_scram(user, password, mechanism)
        server_first = server.step(client.auth_bytes())
        attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        # an unknown user still gets a plausible salt and the usual iteration count
        assert len(base64.b64decode(attrs["s"])) == security.SALT_BYTES and attrs["i"] == "4096"
        client.receive(server_first)
        with pytest.raises(SaslAuthenticationFailedError) as e:
            server.step(client.auth_bytes())
        assert e.value.code == 58 and not server.complete and server.principal is None
        messages.append(str(e.value))
        with pytest.raises(SaslAuthenticationFailedError, match="already failed"):
            server.step(client.auth_bytes())
    assert messages[0] == messages[1] == INVALID_CREDENTIALS.format(mechanism)


def test_scram_unknown_user_salt_is_stable(store):
    salts = {SaslServer("SCRAM-SHA-256", store).step(b"n,,n=ghost,r=abc").split(b",")[1] for _ in range(3)}
    assert len(salts) == 1
    other = SaslServer("SCRAM-SHA-256", store).step(b"n,,n=ghost2,r=abc").split(b",")[1]
    assert other not in salts


def test_plain_wrong_password_and_unknown_user_fail_alike(store):
    messages = []
    for token in (b"\0alice\0wrong", b"\0nobody\0alice-secret"):
        server = SaslServer("PLAIN", store)
        with pytest.raises(SaslAuthenticationFailedError) as e:
            server.step(token)
        messages.append(str(e.value))
    assert messages[0] == messages[1] == INVALID_CREDENTIALS.format("PLAIN")


@pytest.mark.parametrize("token, reason", [
    (b"alice\0alice-secret", "expected 3 NUL-separated tokens, got 2"),
    (b"\0alice\0alice-secret\0x", "expected 3 NUL-separated tokens, got 4"),
    (b"\0\0alice-secret", "username not specified"),
    (b"\0alice\0", "password not specified"),
    (b"bob\0alice\0alice-secret", "authorization id that is different from username"),
    (b"\0alice\0\xff", "not UTF-8"),
])
def test_plain_rejects_malformed_tokens(store, token, reason):
    with pytest.raises(SaslAuthenticationFailedError, match=reason):
        SaslServer("PLAIN", store).step(token)


def test_plain_authzid_equal_to_user_is_accepted(store):
    server = SaslServer("PLAIN", store)
    assert server.step(b"alice\0alice\0alice-secret") == b"" and server.principal == "User:alice"


class ScramTestClient:
    """RFC 5802 client side for the cases kafka-python cannot produce (gs2 authzid, escaped names, tampering)."""

    def __init__(self, mechanism, saslname, password, gs2="n,,", extensions="", nonce="fyko+d2lbbFgONRv9qkxdawL"):
        self.h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.password, self.gs2 = password, gs2
        self.bare = f"n={saslname},r={nonce}{extensions}"

    def first(self) -> bytes:
        return (self.gs2 + self.bare).encode()

    def final(self, server_first: bytes, nonce=None, channel=None, tamper_proof=False) -> bytes:
        attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac(self.h, self.password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", self.h)
        stored_key = hashlib.new(self.h, client_key).digest()
        channel = channel if channel is not None else base64.b64encode(self.gs2.encode()).decode()
        without_proof = f"c={channel},r={nonce if nonce is not None else attrs['r']}"
        auth_message = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        proof = bytearray(a ^ b for a, b in zip(client_key, hmac.digest(stored_key, auth_message, self.h)))
        if tamper_proof:
            proof[0] ^= 1
        self.server_signature = hmac.digest(hmac.digest(salted, b"Server Key", self.h), auth_message, self.h)
        return f"{without_proof},p={base64.b64encode(bytes(proof)).decode()}".encode()


def test_scram_authzid_equal_to_user_and_channel_binding_of_that_header(store):
    client = ScramTestClient("SCRAM-SHA-256", "alice", "alice-secret", gs2="n,a=alice,")
    server = SaslServer("SCRAM-SHA-256", store)
    final = server.step(client.final(server.step(client.first())))
    assert final == b"v=" + base64.b64encode(client.server_signature) and server.principal == "User:alice"


def test_scram_escaped_user_names(tmp_path):
    store = CredentialStore(tmp_path / "users.json")
    store.add_user("a,b=c", "pw", ["SCRAM-SHA-512"])
    server = SaslServer("SCRAM-SHA-512", store)
    client = kp_scram("a=2Cb=3Dc", "pw", "SCRAM-SHA-512")  # kafka-python sends the name as given: pre-escaped
    assert drive(client, server) == 2 and server.principal == "User:a,b=c"
    assert security.scram_escape("a,b=c") == "a=2Cb=3Dc" and security.scram_unescape("=3D2C") == "=2C"


@pytest.mark.parametrize("mechanism", SCRAM)
def test_aiokafka_scram_client_escapes_names_and_authenticates(tmp_path, mechanism):
    from aiokafka.conn import ScramAuthenticator

    store = CredentialStore(tmp_path / "users.json")
    store.add_user("ops,eu=1", "pässword", [mechanism])
    client = ScramAuthenticator(loop=None, sasl_plain_username="ops,eu=1", sasl_plain_password="pässword",
                                sasl_mechanism=mechanism)
    server = SaslServer(mechanism, store)
    first = client.first_message()
    assert first.startswith("n,,n=ops=2Ceu=3D1,r=")
    client.process_server_first_message(server.step(first.encode()).decode())
    client.process_server_final_message(server.step(client.final_message().encode()).decode())  # raises if wrong
    assert server.complete and server.principal == "User:ops,eu=1"


@pytest.mark.parametrize("kind, reason", [
    ("nonce", "invalid client nonce in the final client message"),
    ("nonce-prefix", "invalid client nonce in the final client message"),
    ("channel", "channel binding data does not match"),
    ("proof", "invalid credentials"),
])
def test_scram_tampered_final_message_is_rejected(store, kind, reason):
    client = ScramTestClient("SCRAM-SHA-256", "alice", "alice-secret")
    server = SaslServer("SCRAM-SHA-256", store)
    server_first = server.step(client.first())
    nonce = server_first.decode().split(",")[0][2:]
    kw = {"nonce": nonce[:-1] + ("A" if nonce[-1] != "A" else "B")} if kind == "nonce" else \
        {"nonce": "x" + nonce} if kind == "nonce-prefix" else \
        {"channel": "eSws"} if kind == "channel" else {"tamper_proof": True}
    with pytest.raises(SaslAuthenticationFailedError, match=reason):
        server.step(client.final(server_first, **kw))
    assert not server.complete


@pytest.mark.parametrize("first, reason", [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding is not supported"),
    (b"n,,n=alice,r=abc,tokenauth=true", "tokenauth"),
    (b"n,,m=ext,n=alice,r=abc", "mandatory SCRAM extension"),
    (b"n,a=bob,n=alice,r=abc", "authorization id that is different from username"),
    (b"n,,n=al=ice,r=abc", "invalid SCRAM client first message format"),
    (b"n,,n=alice,r=a,bc", "invalid SCRAM client first message format"),
    (b"n,,n=alice", "invalid SCRAM client first message format"),
    (b"", "invalid SCRAM client first message format"),
    (b"n,,n=\xff,r=abc", "not UTF-8"),
])
def test_scram_rejects_bad_client_first(store, first, reason):
    with pytest.raises(SaslAuthenticationFailedError, match=reason):
        SaslServer("SCRAM-SHA-256", store).step(first)


def test_scram_accepts_y_flag_and_unknown_extensions(store):
    client = ScramTestClient("SCRAM-SHA-512", "alice", "alice-secret", gs2="y,,", extensions=",foo=bar,tokenauth=no")
    server = SaslServer("SCRAM-SHA-512", store)
    server.step(client.final(server.step(client.first())))
    assert server.principal == "User:alice"


def test_mechanism_without_a_credential_fails_like_a_wrong_password(tmp_path):
    store = CredentialStore(tmp_path / "users.json")
    store.add_user("only256", "pw", ["SCRAM-SHA-256"])
    server = SaslServer("SCRAM-SHA-512", store)
    client = kp_scram("only256", "pw", "SCRAM-SHA-512")
    client.receive(server.step(client.auth_bytes()))
    with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
        server.step(client.auth_bytes())
    plain = SaslServer("PLAIN", store)  # PLAIN falls back to the SCRAM-SHA-256 credential
    assert plain.step(b"\0only256\0pw") == b"" and plain.principal == "User:only256"


def test_unsupported_mechanism(store):
    with pytest.raises(UnsupportedSaslMechanismError, match="GSSAPI") as e:
        SaslServer("GSSAPI", store)
    assert e.value.code == 33


# ------------------------------------------------------------------------------------------- credential store

def test_users_file_has_no_password_and_mode_0600(tmp_path):
    path = tmp_path / "state" / "users.json"
    old = os.umask(0)  # even with a permissive umask
    try:
        store = CredentialStore(path)
        store.add_user("carol", "correct horse battery staple", iterations=8192)
    finally:
        os.umask(old)
    data = path.read_bytes()
    assert b"correct horse" not in data and base64.b64encode(b"correct horse battery staple") not in data
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    doc = json.loads(data)
    assert doc["version"] == 1 and set(doc["users"]["carol"]) == set(SCRAM)
    assert doc["users"]["carol"]["SCRAM-SHA-256"].endswith(",iterations=8192")
    assert store.mechanisms("carol") == {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 8192}
    assert store.verify_password("carol", "correct horse battery staple")
    assert not store.verify_password("carol", "correct horse battery stapl")
    assert sorted(os.listdir(path.parent)) == ["users.json", "users.json.lock"]


def test_second_instance_sees_changes(tmp_path):
    path = tmp_path / "users.json"
    cli_side, broker_side = CredentialStore(path), CredentialStore(path)
    assert broker_side.users() == []
    cli_side.add_user("dave", "pw1")
    assert broker_side.users() == ["dave"]
    server = SaslServer("SCRAM-SHA-256", broker_side)
    assert drive(kp_scram("dave", "pw1", "SCRAM-SHA-256"), server) == 2

    cli_side.add_user("dave", "pw2", ["SCRAM-SHA-512"])  # replaces every credential of the user
    assert broker_side.mechanisms("dave") == {"SCRAM-SHA-512": 4096}
    assert not broker_side.verify_password("dave", "pw1") and broker_side.verify_password("dave", "pw2")
    assert cli_side.remove_user("dave") and not cli_side.remove_user("dave")
    assert broker_side.get("dave", "SCRAM-SHA-512") is None and broker_side.users() == []


def test_concurrent_writers_lose_no_user(tmp_path):
    path = tmp_path / "users.json"

    def add(prefix):
        s = CredentialStore(path)  # its own file lock descriptor: flock serializes it against the others
        for i in range(6):
            s.add_user(f"{prefix}{i}", "pw", ["SCRAM-SHA-256"])

    threads = [threading.Thread(target=add, args=(p,)) for p in "xyz"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert CredentialStore(path).users() == sorted(f"{p}{i}" for p in "xyz" for i in range(6))


def test_corrupt_file_refused_at_open_and_last_good_kept_while_running(tmp_path, caplog):
    path = tmp_path / "users.json"
    running = CredentialStore(path)
    running.add_user("erin", "pw")
    path.write_text("{not json")
    with pytest.raises(InvalidConfigError, match="not a valid users file"):
        CredentialStore(path)
    assert running.users() == ["erin"]  # a hand-edited broken file does not lock everyone out
    assert "keeping the previous users" in caplog.text
    with pytest.raises(InvalidConfigError):
        running.add_user("frank", "pw")  # and is never overwritten blindly
    assert path.read_text() == "{not json"


def test_leftover_temp_file_is_cleaned_by_the_next_write(tmp_path):
    path = tmp_path / "users.json"
    store = CredentialStore(path)
    (tmp_path / "users.json.tmp-999-deadbeef").write_text("half")
    store.add_user("gina", "pw")
    assert sorted(os.listdir(tmp_path)) == ["users.json", "users.json.lock"]


@pytest.mark.parametrize("kwargs, message", [
    ({"iterations": 4095}, "4096..16384"),
    ({"iterations": 16385}, "4096..16384"),
    ({"mechanisms": ["SCRAM-SHA-1"]}, "unknown SCRAM mechanism"),
    ({"mechanisms": []}, "at least one"),
    ({"password": ""}, "non-empty"),
    ({"name": ""}, "non-empty"),
    ({"name": "a\nb"}, "control characters"),
])
def test_add_user_validation(tmp_path, kwargs, message):
    args = {"name": "hal", "password": "pw", **kwargs}
    with pytest.raises(ValueError, match=message):
        CredentialStore(tmp_path / "users.json").add_user(**args)
    assert not (tmp_path / "users.json").exists()


# -------------------------------------------------------------------------------------------------- authorizer

def acl(principal, op, rtype, name, pattern="LITERAL", permission="ALLOW", host="*"):
    return AclBinding(principal, host, op, rtype, name, pattern, permission)


BASE_ACLS = [
    acl("User:alice", "READ", "TOPIC", "orders"),
    acl("User:alice", "WRITE", "TOPIC", "orders"),
    acl("User:*", "READ", "GROUP", "*"),
    acl("User:bob", "WRITE", "TOPIC", "logs-", "PREFIXED"),
    acl("User:bob", "DELETE", "TOPIC", "logs-secret", "PREFIXED", "DENY"),
    acl("User:bob", "DELETE", "TOPIC", "logs-", "PREFIXED"),
    acl("User:carol", "READ", "TOPIC", "metrics", host="10.0.0.1"),
    acl("User:*", "READ", "TOPIC", "shared"),
    acl("User:mallory", "READ", "TOPIC", "shared", permission="DENY"),
    acl("User:*", "ALL", "TOPIC", "open"),
    acl("User:*", "WRITE", "TOPIC", "open", permission="DENY", host="10.0.0.66"),
    acl("User:dan", "ALL", "TOPIC", "*"),
    acl("User:dan", "ALL", "TOPIC", "secret", permission="DENY"),
    acl("User:erin", "ALTER_CONFIGS", "TOPIC", "cfg"),
    acl("User:erin", "READ", "TOPIC", "both"),
    acl("User:erin", "READ", "TOPIC", "both", permission="DENY"),
    acl("User:ops", "CREATE", "CLUSTER", CLUSTER_NAME),
    acl("User:ops", "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER_NAME),
    acl("User:tx", "WRITE", "TRANSACTIONAL_ID", "tx-", "PREFIXED"),
]

H = "127.0.0.1"
AUTHZ_CASES = [
    # principal, host, operation, resource type, name, expected
    ("User:alice", H, "READ", "TOPIC", "orders", True),
    ("User:alice", H, "WRITE", "TOPIC", "orders", True),
    ("User:alice", H, "DELETE", "TOPIC", "orders", False),
    ("User:alice", H, "DESCRIBE", "TOPIC", "orders", True),          # READ/WRITE imply DESCRIBE
    ("User:alice", H, "READ", "TOPIC", "orders2", False),            # literal: exact name only
    ("User:bob", H, "READ", "TOPIC", "orders", False),               # other principal
    ("User:alice", H, "READ", "GROUP", "any-group", True),           # User:* on literal '*'
    ("User:alice", H, "DESCRIBE", "GROUP", "g", True),
    ("User:alice", H, "DELETE", "GROUP", "g", False),
    ("User:bob", H, "WRITE", "TOPIC", "logs-app", True),             # prefixed
    ("User:bob", H, "WRITE", "TOPIC", "logs-", True),
    ("User:bob", H, "WRITE", "TOPIC", "logs", False),
    ("User:bob", H, "DELETE", "TOPIC", "logs-app", True),
    ("User:bob", H, "DELETE", "TOPIC", "logs-secret-1", False),      # prefixed DENY beats prefixed ALLOW
    ("User:bob", H, "WRITE", "TOPIC", "logs-secret-1", True),        # the DENY names DELETE only
    ("User:carol", "10.0.0.1", "READ", "TOPIC", "metrics", True),    # host
    ("User:carol", "10.0.0.2", "READ", "TOPIC", "metrics", False),
    ("User:carol", "::ffff:10.0.0.1", "READ", "TOPIC", "metrics", True),  # IPv4-mapped from a dual-stack socket
    ("User:alice", H, "READ", "TOPIC", "shared", True),
    ("User:mallory", H, "READ", "TOPIC", "shared", False),           # DENY wins
    ("User:mallory", H, "DESCRIBE", "TOPIC", "shared", True),        # a DENY READ does not deny DESCRIBE (Kafka)
    ("User:x", H, "ALTER", "TOPIC", "open", True),                   # ALL grants everything
    ("User:x", H, "WRITE", "TOPIC", "open", True),
    ("User:x", "10.0.0.66", "WRITE", "TOPIC", "open", False),        # DENY from one host
    ("User:x", "10.0.0.66", "READ", "TOPIC", "open", True),
    ("User:dan", H, "DELETE", "TOPIC", "anything", True),
    ("User:dan", H, "READ", "TOPIC", "secret", False),               # DENY ALL on a literal beats ALLOW ALL on '*'
    ("User:dan", H, "DESCRIBE", "TOPIC", "secret", False),
    ("User:erin", H, "DESCRIBE_CONFIGS", "TOPIC", "cfg", True),      # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    ("User:erin", H, "DESCRIBE", "TOPIC", "cfg", False),
    ("User:erin", H, "DESCRIBE", "TOPIC", "both", True),             # implied from an ALLOW, the DENY names READ
    ("User:erin", H, "READ", "TOPIC", "both", False),
    ("User:ops", H, "CREATE", "CLUSTER", CLUSTER_NAME, True),
    ("User:ops", H, "ALTER", "CLUSTER", CLUSTER_NAME, False),
    ("User:alice", H, "CREATE", "CLUSTER", CLUSTER_NAME, False),
    ("User:tx", H, "WRITE", "TRANSACTIONAL_ID", "tx-1", True),
    ("User:tx", H, "DESCRIBE", "TRANSACTIONAL_ID", "tx-1", True),
    ("User:tx", H, "WRITE", "TOPIC", "tx-1", False),                 # resource types are separate
    ("User:nobody", H, "READ", "TOPIC", "no-acl-topic", False),      # no ACL: allow.everyone.if.no.acl.found=false
    ("User:admin", H, "READ", "TOPIC", "secret", True),              # super user
    ("User:admin", "10.0.0.66", "WRITE", "TOPIC", "open", True),
]


@pytest.fixture
def authorizer(tmp_path):
    a = Authorizer(tmp_path / "acls.json", super_users=["User:admin"])
    assert a.add(*BASE_ACLS) == len(BASE_ACLS)
    return a


@pytest.mark.parametrize("principal, host, op, rtype, name, expected", AUTHZ_CASES)
def test_authorize_table(authorizer, principal, host, op, rtype, name, expected):
    assert authorizer.authorize(principal, host, op, rtype, name) is expected


def test_allow_everyone_if_no_acl_found(tmp_path, authorizer):
    lax = Authorizer(authorizer.path, allow_everyone_if_no_acl_found=True)
    assert lax.authorize("User:nobody", H, "DESCRIBE", "TRANSACTIONAL_ID", "no-acl")
    assert not lax.authorize("User:nobody", H, "WRITE", "TRANSACTIONAL_ID", "tx-9")  # a PREFIXED ACL covers it
    assert not lax.authorize("User:nobody", H, "READ", "TOPIC", "no-acl-topic")  # dan's '*' ACL covers every topic
    assert not lax.authorize("User:nobody", H, "CREATE", "CLUSTER", CLUSTER_NAME)  # ops has a CLUSTER ACL
    path = tmp_path / "few.json"
    Authorizer(path).add(acl("User:alice", "READ", "TOPIC", "orders"),
                         acl("User:bob", "READ", "TOPIC", "lo", "PREFIXED"))
    for lax_flag in (True, False):
        a = Authorizer(path, allow_everyone_if_no_acl_found=lax_flag)
        assert a.authorize("User:nobody", H, "DELETE", "TOPIC", "other") is lax_flag
        assert a.authorize("User:nobody", H, "ALTER_CONFIGS", "CLUSTER", CLUSTER_NAME) is lax_flag
        assert not a.authorize("User:nobody", H, "READ", "TOPIC", "orders")  # ACLs exist (for alice)
        assert not a.authorize("User:nobody", H, "READ", "TOPIC", "logs")  # bob's PREFIXED ACL covers it
        assert a.authorize("User:alice", H, "READ", "TOPIC", "orders")


def test_super_users_from_a_property_string(tmp_path):
    a = Authorizer(tmp_path / "acls.json", super_users="User:admin;User:root")
    a.add(acl("User:*", "ALL", "TOPIC", "*", permission="DENY"))
    assert a.super_users == {"User:admin", "User:root"}
    assert a.authorize("User:root", H, "WRITE", "TOPIC", "t") and not a.authorize("User:x", H, "WRITE", "TOPIC", "t")


def test_authorize_by_resource_type(tmp_path):
    path = tmp_path / "acls.json"
    a = Authorizer(path, super_users=["User:admin"])
    a.add(acl("User:p", "WRITE", "TOPIC", "app-", "PREFIXED"),
          acl("User:q", "WRITE", "TOPIC", "app-", "PREFIXED"), acl("User:q", "WRITE", "TOPIC", "app", "PREFIXED",
                                                                   "DENY"),
          acl("User:r", "WRITE", "TOPIC", "t1"), acl("User:r", "WRITE", "TOPIC", "t1", permission="DENY"),
          acl("User:s", "ALL", "TOPIC", "*"),
          acl("User:u", "WRITE", "TOPIC", "t2"), acl("User:u", "ALL", "TOPIC", "*", permission="DENY"),
          acl("User:v", "READ", "TOPIC", "t3"))
    by_type = {p: a.authorize_by_resource_type(f"User:{p}", H, "WRITE", "TOPIC") for p in "pqrsuvw"}
    assert by_type == {"p": True, "q": False, "r": False, "s": True, "u": False, "v": False, "w": False}
    assert a.authorize_by_resource_type("User:admin", H, "WRITE", "TOPIC")
    lax = Authorizer(path, allow_everyone_if_no_acl_found=True)  # '*' ACLs cover every topic: nothing changes
    assert not lax.authorize_by_resource_type("User:q", H, "WRITE", "TOPIC")
    few = tmp_path / "few.json"
    Authorizer(few).add(acl("User:q", "WRITE", "TOPIC", "app", "PREFIXED", "DENY"))
    # a topic without ACLs may exist, and anyone may write it (Kafka's answer too)
    assert Authorizer(few, allow_everyone_if_no_acl_found=True).authorize_by_resource_type("User:q", H, "WRITE",
                                                                                           "TOPIC")
    assert not Authorizer(few).authorize_by_resource_type("User:q", H, "WRITE", "TOPIC")


def test_acls_file_format_and_reload_by_second_instance(tmp_path):
    path = tmp_path / ".kafkalog-broker" / "acls.json"
    cli_side, broker_side = Authorizer(path), Authorizer(path)
    assert not broker_side.authorize("User:zed", H, "READ", "TOPIC", "t")  # cached: no ACL
    cli_side.add(acl("User:zed", "READ", "TOPIC", "t"))
    assert broker_side.authorize("User:zed", H, "READ", "TOPIC", "t")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text()) == {"version": 1, "acls": [
        {"resourceType": "Topic", "name": "t", "patternType": "LITERAL", "principal": "User:zed", "host": "*",
         "operation": "Read", "permissionType": "Allow"}]}
    assert cli_side.remove(AclBindingFilter(principal="User:zed")) == 1
    assert not broker_side.authorize("User:zed", H, "READ", "TOPIC", "t")
    assert cli_side.add(acl("User:zed", "READ", "TOPIC", "t")) == 1 and cli_side.add(
        acl("User:zed", "read", "topic", "t")) == 0  # same binding after normalization


def test_list_and_remove_filters(authorizer):
    assert len(authorizer.list()) == len(BASE_ACLS)
    match = authorizer.list(AclBindingFilter(resource_type="TOPIC", name="logs-secret-9", pattern_type="MATCH"))
    assert {(b.name, b.permission, b.operation) for b in match} == {
        ("logs-", "ALLOW", "WRITE"), ("logs-", "ALLOW", "DELETE"), ("logs-secret", "DENY", "DELETE"),
        ("*", "ALLOW", "ALL")}
    assert [b.name for b in authorizer.list(AclBindingFilter(pattern_type="PREFIXED", resource_type="TOPIC"))] == [
        "logs-", "logs-", "logs-secret"]
    assert authorizer.remove(AclBindingFilter(principal="User:bob", permission="DENY")) == 1
    assert authorizer.authorize("User:bob", H, "DELETE", "TOPIC", "logs-secret-1")
    assert authorizer.remove(acl("User:alice", "READ", "TOPIC", "orders")) == 1
    assert authorizer.remove(acl("User:alice", "READ", "TOPIC", "orders")) == 0
    assert not authorizer.authorize("User:alice", H, "READ", "TOPIC", "orders")
    assert authorizer.authorize("User:alice", H, "DESCRIBE", "TOPIC", "orders")  # WRITE still implies it
    assert authorizer.remove(AclBindingFilter()) == len(BASE_ACLS) - 2 and authorizer.list() == []


@pytest.mark.parametrize("args, message", [
    (("alice", "READ", "TOPIC", "t"), "expected 'User:<name>'"),
    (("user:alice", "READ", "TOPIC", "t"), "expected 'User:<name>'"),
    (("User:", "READ", "TOPIC", "t"), "expected 'User:<name>'"),
    (("User:a", "FLY", "TOPIC", "t"), "unknown operation 'FLY'"),
    (("User:a", "WRITE", "GROUP", "g"), "operation WRITE is not valid for GROUP"),
    (("User:a", "CREATE", "CLUSTER", "other"), "literal name 'kafka-cluster'"),
    (("User:a", "READ", "TOPIC", "*", "PREFIXED"), "use a LITERAL"),
    (("User:a", "READ", "TOPIC", ""), "non-empty"),
    (("User:a", "READ", "QUEUE", "t"), "unknown resource type"),
    (("User:a", "READ", "TOPIC", "t", "LITERAL", "ALLOW", "example.com"), "host names never match"),
])
def test_acl_binding_validation(args, message):
    with pytest.raises(ValueError, match=message):
        acl(*args)


def test_kafka_spellings_are_accepted():
    b = AclBinding("User:a", "::FFFF:10.0.0.1", "DescribeConfigs", "Topic", "x", "prefixed", "Deny")
    assert (b.operation, b.resource_type, b.pattern_type, b.permission, b.host) == (
        "DESCRIBE_CONFIGS", "TOPIC", "PREFIXED", "DENY", "::ffff:a00:1")
    b = AclBinding("User:a", "*", "idempotent-write", "cluster", CLUSTER_NAME)
    assert (b.operation, b.resource_type) == ("IDEMPOTENT_WRITE", "CLUSTER")
    assert AclBinding("User:a", "*", "write", "transactional_id", "t").resource_type == "TRANSACTIONAL_ID"


_PRINCIPALS = ["User:p", "User:q", "User:*"]
_HOSTS = ["*", "10.0.0.1", "10.0.0.2"]
_NAMES = st.text(alphabet="ab", min_size=1, max_size=3)


@st.composite
def bindings(draw):
    rtype = draw(st.sampled_from(["TOPIC", "GROUP"]))
    op = draw(st.sampled_from(sorted(security.SUPPORTED_OPERATIONS[rtype])))
    pattern = draw(st.sampled_from(["LITERAL", "PREFIXED"]))
    name = draw(_NAMES | st.just("*")) if pattern == "LITERAL" else draw(_NAMES)
    return AclBinding(draw(st.sampled_from(_PRINCIPALS)), draw(st.sampled_from(_HOSTS)), op, rtype, name, pattern,
                      draw(st.sampled_from(["ALLOW", "DENY"])))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(others=st.lists(bindings(), max_size=12), principal=st.sampled_from(["User:p", "User:q"]),
       host=st.sampled_from(["10.0.0.1", "10.0.0.2"]), rtype=st.sampled_from(["TOPIC", "GROUP"]), name=_NAMES,
       deny_principal=st.booleans(), deny_host=st.booleans(), deny_all=st.booleans(),
       deny_pattern=st.sampled_from(["exact", "wildcard", "prefix"]), data=st.data())
def test_a_matching_deny_always_denies(others, principal, host, rtype, name, deny_principal, deny_host, deny_all,
                                       deny_pattern, data):
    op = data.draw(st.sampled_from(sorted(security.SUPPORTED_OPERATIONS[rtype] - {"ALL"})))
    if deny_pattern == "exact":
        pattern, acl_name = "LITERAL", name
    elif deny_pattern == "wildcard":
        pattern, acl_name = "LITERAL", "*"
    else:
        pattern, acl_name = "PREFIXED", name[:data.draw(st.integers(1, len(name)))]
    deny = AclBinding(principal if deny_principal else "User:*", host if deny_host else "*",
                      "ALL" if deny_all else op, rtype, acl_name, pattern, "DENY")
    with tempfile.TemporaryDirectory() as d:
        for super_user, lax in ((False, False), (False, True), (True, False)):
            a = Authorizer(os.path.join(d, "acls.json"), super_users=[principal] if super_user else [],
                           allow_everyone_if_no_acl_found=lax)
            if not super_user and not lax:
                a.add(*others)
                a.authorize(principal, host, op, rtype, name)  # a cached decision must not outlive the change
                a.add(deny)
            assert a.authorize(principal, host, op, rtype, name) is super_user


# ------------------------------------------------------------------------------------------------------ CLIs

def test_users_cli(tmp_path, capsys, monkeypatch):
    path = tmp_path / ".kafkalog-broker" / "users.json"
    assert users_main(["add", "ivy", "--password", "pw1", "--mechanism", "scram-sha-512", "--iterations", "5000"],
                      path) == 0
    assert "added user 'ivy': SCRAM-SHA-512 (5000 iterations)" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin\n"))
    assert users_main(["add", "jay", "--password-stdin"], path) == 0
    assert CredentialStore(path).verify_password("jay", "from stdin")
    assert users_main(["add", "ivy", "--password", "pw2"], path) == 0
    assert "updated user 'ivy'" in capsys.readouterr().out
    assert users_main(["list"], path) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ivy\tSCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=4096",
        "jay\tSCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=4096"]
    assert users_main(["remove", "jay"], path) == 0
    assert CredentialStore(path).users() == ["ivy"]
    assert b"pw2" not in path.read_bytes()


@pytest.mark.parametrize("argv, code, message", [
    (["add", "kim", "--password", "pw", "--iterations", "100"], 1, "iterations 100 out of range"),
    (["add", "kim", "--password", "pw", "--mechanism", "PLAIN"], 1, "PLAIN needs no credential"),
    (["add", "kim", "--password", "pw", "--mechanism", "MD5"], 1, "unknown SCRAM mechanism 'MD5'"),
    (["add", "kim", "--password", ""], 1, "the password is empty"),
    (["remove", "nobody"], 1, "no such user 'nobody'"),
    (["add", "kim", "--password", "a", "--password-stdin"], 2, "not allowed with argument"),
    (["rename", "kim"], 2, "invalid choice"),
])
def test_users_cli_bad_input(tmp_path, capsys, argv, code, message):
    path = tmp_path / "users.json"
    assert users_main(argv, path) == code
    err = capsys.readouterr().err
    assert message in err and err.startswith("kafkalog: error: ") and err.count("\n") == 1
    assert CredentialStore(path).users() == []


def test_acls_cli(tmp_path, capsys):
    path = tmp_path / "acls.json"
    assert acls_main(["--add", "--principal", "User:ann", "--operation", "read", "--operation", "Describe",
                      "--topic", "orders", "--group", "g1"], path) == 0
    out = capsys.readouterr().out
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:" in out
    assert "\t(principal=User:ann, host=*, operation=READ, permissionType=ALLOW)" in out and "added 4 ACLs" in out
    assert acls_main(["--add", "--deny-principal", "User:ann", "--host", "10.1.1.1", "--operation", "WRITE",
                      "--topic", "ord", "--resource-pattern-type", "prefixed"], path) == 0
    assert acls_main(["--add", "--principal", "User:ops", "--operation", "CREATE", "--cluster"], path) == 0
    capsys.readouterr()
    a = Authorizer(path)
    assert a.authorize("User:ann", H, "READ", "GROUP", "g1") and a.authorize("User:ops", H, "CREATE", "CLUSTER",
                                                                              CLUSTER_NAME)
    assert not a.authorize("User:ann", "10.1.1.1", "WRITE", "TOPIC", "orders")

    assert acls_main(["--list", "--topic", "orders", "--resource-pattern-type", "match"], path) == 0
    out = capsys.readouterr().out
    assert "name=orders, patternType=LITERAL" in out and "name=ord, patternType=PREFIXED" in out
    assert "(principal=User:ann, host=10.1.1.1, operation=WRITE, permissionType=DENY)" in out
    assert acls_main(["--list", "--principal", "User:ops"], path) == 0
    assert capsys.readouterr().out.count("\t(") == 1

    assert acls_main(["--remove", "--principal", "User:ann", "--allow", "--topic", "orders"], path) == 0
    assert "removed 2 ACLs" in capsys.readouterr().out
    assert not a.authorize("User:ann", H, "READ", "TOPIC", "orders")
    assert acls_main(["--remove", "--topic", "ord", "--resource-pattern-type", "prefixed"], path) == 0
    assert acls_main(["--remove", "--cluster"], path) == 0
    assert [b.resource_type for b in a.list()] == ["GROUP", "GROUP"]


@pytest.mark.parametrize("argv, code, message", [
    (["--add", "--principal", "User:a", "--operation", "FLY", "--topic", "t"], 1, "unknown operation 'FLY'"),
    (["--add", "--principal", "User:a", "--operation", "WRITE", "--group", "g"], 1,
     "operation WRITE is not valid for GROUP"),
    (["--add", "--principal", "alice", "--operation", "READ", "--topic", "t"], 1, "expected 'User:<name>'"),
    (["--add", "--principal", "User:a", "--topic", "t"], 1, "--add needs --operation"),
    (["--add", "--principal", "User:a", "--operation", "READ"], 1, "--add needs a resource"),
    (["--add", "--operation", "READ", "--topic", "t"], 1, "--add needs --principal"),
    (["--add", "--principal", "User:a", "--operation", "READ", "--topic", "t", "--resource-pattern-type", "match"],
     1, "literal or prefixed, not match"),
    (["--add", "--principal", "User:a", "--operation", "READ", "--topic", "t", "--host", "db.local"], 1,
     "host names never match"),
    (["--remove", "--principal", "User:a"], 1, "--remove needs a resource"),
    (["--principal", "User:a"], 2, "one of the arguments --add --remove --list is required"),
    (["--add", "--list"], 2, "not allowed with argument"),
])
def test_acls_cli_bad_input(tmp_path, capsys, argv, code, message):
    path = tmp_path / "acls.json"
    assert acls_main(argv, path) == code
    err = capsys.readouterr().err
    assert message in err and err.startswith("kafkalog: error: ") and err.count("\n") == 1
    assert Authorizer(path).list() == []


def test_default_paths(tmp_path):
    assert security.default_paths(tmp_path) == (tmp_path / ".kafkalog-broker" / "users.json",
                                                tmp_path / ".kafkalog-broker" / "acls.json")
