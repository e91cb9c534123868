"""Authentication and authorization for the broker facade: SASL PLAIN and SCRAM-SHA-256/512 server mechanisms, the
users file they check, and an ACL authorizer with Kafka's model (AclAuthorizer / StandardAuthorizer rules).

SASL exchanges (the bytes SaslAuthenticate v0/v1 carry in ``auth_bytes``, or raw tokens after SaslHandshake v0)::

    PLAIN (RFC 4616)   client => [authzid] NUL authcid NUL passwd            server => (empty)
    SCRAM (RFC 5802 / RFC 7677, as Kafka's ScramSaslServer; saslname escapes "," as =2C and "=" as =3D)
      client-first  => gs2-header client-first-bare
        gs2-header  => ("n" | "y") "," ["a=" saslname] ","                ("p=" (channel binding) is refused)
        client-first-bare => "n=" saslname ",r=" c-nonce ["," ext-name "=" value]*
      server-first  => "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
      client-final  => "c=" base64(gs2-header) ",r=" c-nonce s-nonce ["," ext]* ",p=" base64(ClientProof)
      server-final  => "v=" base64(ServerSignature)

      SaltedPassword := PBKDF2-HMAC-H(password, salt, iterations)
      ClientKey := HMAC(SaltedPassword, "Client Key")    StoredKey := H(ClientKey)
      ServerKey := HMAC(SaltedPassword, "Server Key")
      AuthMessage := client-first-bare "," server-first "," client-final-without-proof
      ClientProof := ClientKey XOR HMAC(StoredKey, AuthMessage)    ServerSignature := HMAC(ServerKey, AuthMessage)

users.json (mode 0600, replaced atomically; no password is ever stored, PLAIN is checked against a SCRAM
credential by recomputing SaltedPassword)::

    {"version": 1, "users": {Name: {Mechanism: ScramCredential}}}
      Mechanism       => "SCRAM-SHA-256" | "SCRAM-SHA-512"
      ScramCredential => "salt=" base64 ",stored_key=" base64 ",server_key=" base64 ",iterations=" Int32
                         (Kafka's ScramCredentialUtils string, the form Kafka keeps in its metadata)

acls.json (mode 0600, replaced atomically; entries in Kafka's ACL JSON notation)::

    {"version": 1, "acls": [AclEntry]}
      AclEntry => {"resourceType": "Topic"|"Group"|"Cluster"|"TransactionalId", "name": String,
                   "patternType": "LITERAL"|"PREFIXED", "principal": "User:" Name | "User:*", "host": IP | "*",
                   "operation": "Read"|"Write"|..., "permissionType": "Allow"|"Deny"}

Both files are re-read when they change on disk (inode, mtime, size), so a running broker sees ``kafkalog users``
and ``kafkalog acls`` run by another process at its next authentication or authorization.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import getpass
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import sys
import threading
import time
from pathlib import Path

from ..errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    KafkaError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    storage_error,
)
from ..storage.files import FileLock, fsync_dir, make_durable_dir

log = logging.getLogger("kafkalog.broker")

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_DIGEST_SIZE = {"SCRAM-SHA-256": 32, "SCRAM-SHA-512": 64}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096   # Kafka's ScramMechanism minimum for SHA-256 and SHA-512
MAX_ITERATIONS = 16384  # Kafka's ScramControlManager refuses more
SALT_BYTES = 32

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource (Kafka's ResourcePattern name for the cluster)
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID")
PATTERN_TYPES = ("LITERAL", "PREFIXED")
PERMISSIONS = ("ALLOW", "DENY")
# Kafka's AclEntry.supportedOperations: an ACL naming another operation for the type could never match a check
SUPPORTED_OPERATIONS = {
    "TOPIC": frozenset({"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
                        "ALTER_CONFIGS", "ALL"}),
    "GROUP": frozenset({"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "ALL"}),  # 4.x: configs
    "CLUSTER": frozenset({"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
                          "ALTER", "DESCRIBE", "ALL"}),
    "TRANSACTIONAL_ID": frozenset({"DESCRIBE", "WRITE", "ALL"}),
}
# operation checked -> ALLOW operations that grant it (AclAuthorizer: READ, WRITE, DELETE, ALTER imply DESCRIBE;
# ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL grants everything). DENY never implies: only the operation or ALL.
_GRANTED_BY = {op: frozenset({op, "ALL"}) for op in OPERATIONS}
_GRANTED_BY["DESCRIBE"] = frozenset({"DESCRIBE", "READ", "WRITE", "DELETE", "ALTER", "ALL"})
_GRANTED_BY["DESCRIBE_CONFIGS"] = frozenset({"DESCRIBE_CONFIGS", "ALTER_CONFIGS", "ALL"})
# Kafka's spelling in its ACL JSON and in kafka-acls output
_JSON_RESOURCE = {"TOPIC": "Topic", "GROUP": "Group", "CLUSTER": "Cluster", "TRANSACTIONAL_ID": "TransactionalId"}
_JSON_OPERATION = {op: "".join(w.capitalize() for w in op.split("_")) for op in OPERATIONS}
_JSON_PERMISSION = {"ALLOW": "Allow", "DENY": "Deny"}
# the wire code a denial on each resource type answers with (53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
DENIAL_ERROR_CODE = {"TOPIC": 29, "GROUP": 30, "CLUSTER": 31, "TRANSACTIONAL_ID": 53}

_DECISION_CACHE_MAX = 65536

BROKER_STATE_DIR = ".kafkalog-broker"  # inside the data dir
USERS_FILE = "users.json"
ACLS_FILE = "acls.json"


def default_paths(data_dir) -> tuple[Path, Path]:
    """(users.json, acls.json) of a data dir's broker."""
    state = Path(data_dir) / BROKER_STATE_DIR
    return state / USERS_FILE, state / ACLS_FILE


def _canonical(value: str, allowed, what: str) -> str:
    """'describe-configs', 'DescribeConfigs', 'describe_configs' -> 'DESCRIBE_CONFIGS' (Kafka accepts any case)."""
    if value in allowed:
        return value
    squashed = str(value).replace("_", "").replace("-", "").upper()
    for name in allowed:
        if name.replace("_", "").replace("-", "") == squashed:
            return name
    raise ValueError(f"unknown {what} {value!r} (expected one of {', '.join(allowed)})")


# ---------------------------------------------------------------------------------------------------- credentials

@dataclasses.dataclass(frozen=True)
class ScramCredential:
    """A SCRAM credential as Kafka stores it: salt, StoredKey, ServerKey, iterations (never the password)."""

    salt: bytes
    stored_key: bytes = dataclasses.field(repr=False)
    server_key: bytes = dataclasses.field(repr=False)
    iterations: int = DEFAULT_ITERATIONS

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                      salt: bytes | None = None) -> ScramCredential:
        salt = salt or secrets.token_bytes(SALT_BYTES)
        salted = _salted_password(mechanism, password, salt, iterations)
        h = _HASH[mechanism]
        client_key = hmac.digest(salted, b"Client Key", h)
        return cls(salt, hashlib.new(h, client_key).digest(), hmac.digest(salted, b"Server Key", h), iterations)

    def to_string(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_string(cls, text: str, mechanism: str) -> ScramCredential:
        try:
            fields = dict(part.split("=", 1) for part in text.split(","))
            if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
                raise ValueError("expected salt, stored_key, server_key and iterations")
            cred = cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (ValueError, TypeError, AttributeError, binascii.Error) as e:
            raise ValueError(f"malformed {mechanism} credential: {e}") from None
        size = _DIGEST_SIZE[mechanism]
        if len(cred.stored_key) != size or len(cred.server_key) != size or not cred.salt or cred.iterations < 1:
            raise ValueError(f"malformed {mechanism} credential: keys must be {size} bytes, salt and iterations set")
        return cred

    def matches_password(self, mechanism: str, password: str) -> bool:
        salted = _salted_password(mechanism, password, self.salt, self.iterations)
        h = _HASH[mechanism]
        stored = hashlib.new(h, hmac.digest(salted, b"Client Key", h)).digest()
        server = hmac.digest(salted, b"Server Key", h)
        # both compared, always: the time taken does not say which one differed
        return hmac.compare_digest(stored, self.stored_key) & hmac.compare_digest(server, self.server_key)


def _salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    # No SASLprep: Kafka's ScramFormatter and every Kafka client use the UTF-8 bytes as they are.
    return hashlib.pbkdf2_hmac(_HASH[mechanism], password.encode("utf-8"), salt, iterations)


def check_user_name(name) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("a user name must be a non-empty string")
    if any(ord(c) < 0x20 or c == "\x7f" for c in name):
        raise ValueError(f"user name {name!r} contains control characters")
    return name


def check_iterations(iterations) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not (
            MIN_ITERATIONS <= iterations <= MAX_ITERATIONS):
        raise ValueError(f"iterations {iterations!r} out of range: Kafka accepts {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    return iterations


class _JsonDocument:
    """One small JSON file, parsed into an immutable state that is re-read when the file changes on disk.

    Writes take an flock on ``<path>.lock`` (so writers in different processes serialize their read-modify-write),
    write ``<path>.tmp-<pid>-<random>`` with mode 0600, fsync, rename over the file and fsync the directory: a
    reader sees the old or the new document, never part of one. Thread-safe.
    """

    def __init__(self, path, what: str, parse, dump, empty, check_interval_s: float = 0.0):
        self.path = Path(path)
        self._path_str = os.fspath(self.path)  # os.stat of a str is the cheap part of every check
        self.what = what
        self._parse, self._dump, self._empty = parse, dump, empty
        self._lock = threading.Lock()
        self._file_lock = FileLock(self.path.with_name(self.path.name + ".lock"))
        self._stamp = self._bad_stamp = None
        self.state = empty
        self._check_interval_s = check_interval_s
        self._checked_at = time.monotonic()
        with self._lock:
            self._reload(strict=True)

    def current(self):
        with self._lock:
            if not self._check_interval_s or time.monotonic() - self._checked_at >= self._check_interval_s:
                self._reload(strict=False)
                self._checked_at = time.monotonic()
            return self.state

    def update(self, mutate):
        """``mutate(state) -> (new_state or None, result)`` on the state read under the file lock; writes it."""
        with self._lock:
            self._make_parent()
            self._file_lock.acquire(what=self.what)
            try:
                self._clean_leftovers()
                self._reload(strict=True, force=True)
                new_state, result = mutate(self.state)
                if new_state is not None:
                    self._write(self._dump(new_state))
                    self.state, self._stamp = new_state, self._stat()
                return result
            finally:
                self._file_lock.close()  # drops the flock; writes are rare, no descriptor is kept between them

    # workers (lock held) ------------------------------------------------------------------------------------

    def _stat(self):
        try:
            st = os.stat(self._path_str)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise storage_error(e, "stat", self.path) from None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)

    def _reload(self, strict: bool, force: bool = False) -> None:
        stamp = self._stat()
        if not force and (stamp == self._stamp or (not strict and stamp == self._bad_stamp)):
            return
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
                data = f.read()
            if st.st_mode & 0o077:
                log.warning("%s is readable by other users (mode %o); kafkalog writes it 0600", self.path,
                            st.st_mode & 0o777)
            state = self._parse(json.loads(data))
        except FileNotFoundError:
            stamp, state = None, self._empty
        except OSError as e:
            raise storage_error(e, "read", self.path) from None
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            err = InvalidConfigError(f"{self.path}: not a valid {self.what} file: {e}")
            if strict:
                raise err from None
            # a hand-edited file that does not parse: keep serving the last good state rather than none
            if stamp != self._bad_stamp:
                log.error("%s; keeping the previous %s", err, self.what)
            self._bad_stamp = stamp
            return
        self.state, self._stamp, self._bad_stamp = state, stamp, None

    def _make_parent(self) -> None:
        try:
            make_durable_dir(self.path.parent, mode=0o700)  # ACLs and credentials survive a power loss
        except OSError as e:
            raise storage_error(e, "create directory", self.path.parent) from None

    def _clean_leftovers(self) -> None:
        # every writer holds the file lock, so a temp file seen now was left by a writer that died
        for p in self.path.parent.glob(self.path.name + ".tmp-*"):
            try:
                p.unlink()
            except OSError:
                pass

    def _write(self, doc) -> None:
        data = (json.dumps(doc, indent=2) + "\n").encode("utf-8")
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.fchmod(fd, 0o600)  # whatever the umask: credentials are for the owner only
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise storage_error(e, "write", self.path) from None
        fsync_dir(self.path.parent)


def _parse_users(doc) -> dict:
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("users"), dict):
        raise ValueError('expected {"version": 1, "users": {...}}')
    users = {}
    for name, mechs in doc["users"].items():
        if not isinstance(mechs, dict) or not mechs:
            raise ValueError(f"user {name!r}: expected an object of SCRAM credentials")
        creds = {}
        for mech, text in mechs.items():
            if mech not in SCRAM_MECHANISMS:
                raise ValueError(f"user {name!r}: unknown mechanism {mech!r}")
            creds[mech] = ScramCredential.from_string(text, mech)
        users[name] = creds
    return users


def _dump_users(users: dict) -> dict:
    return {"version": 1, "users": {name: {m: c.to_string() for m, c in sorted(creds.items())}
                                    for name, creds in sorted(users.items())}}


class CredentialStore:
    """The users file: SCRAM credentials per user and mechanism, never a password.

    Thread-safe. Process-safe: ``add_user``/``remove_user`` from any process serialize on a file lock and replace
    the file atomically; every read first checks whether the file changed and re-reads it if so.
    """

    def __init__(self, path, check_interval_s: float = 0.0):
        # check_interval_s: how long a read may trust the last look at the file (0: look every time, ~3 us)
        self._doc = _JsonDocument(path, "users", _parse_users, _dump_users, {}, check_interval_s)
        # per-process secret for the made-up salt of unknown users (RFC 5802 §5.1): the same name gets the same
        # salt every time, so a server-first message does not tell whether the user exists
        self._mock_secret = secrets.token_bytes(32)

    @property
    def path(self) -> Path:
        return self._doc.path

    def add_user(self, name: str, password: str, mechanisms=SCRAM_MECHANISMS, iterations: int = DEFAULT_ITERATIONS,
                 *, salt: bytes | None = None) -> bool:
        """Set ``name``'s password: new SCRAM credentials for each mechanism; returns True for a new user.

        The user's credentials are replaced as a whole, so no mechanism keeps accepting an older password.
        ``salt`` is for test vectors only (a fresh random salt per mechanism otherwise).
        """
        check_user_name(name)
        if not isinstance(password, str) or not password:
            raise ValueError("a password must be a non-empty string")
        mechs = [_canonical(m, SCRAM_MECHANISMS, "SCRAM mechanism") for m in ([mechanisms] if isinstance(
            mechanisms, str) else mechanisms)]
        if not mechs:
            raise ValueError("at least one SCRAM mechanism is needed")
        check_iterations(iterations)
        creds = {m: ScramCredential.from_password(m, password, iterations, salt) for m in dict.fromkeys(mechs)}

        def mutate(users):
            return {**users, name: creds}, name not in users
        return self._doc.update(mutate)

    def set_credential(self, name: str, mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> None:
        """Set one mechanism's credential of ``name`` from a client-side salted password (Kafka's
        AlterUserScramCredentials upsertion: the client runs PBKDF2, the broker keeps StoredKey and ServerKey).
        The user's other mechanism keeps its credential, as in Kafka."""
        check_user_name(name)
        mechanism = _canonical(mechanism, SCRAM_MECHANISMS, "SCRAM mechanism")
        check_iterations(iterations)
        if not salt or not salted_password:
            raise ValueError("a SCRAM credential needs a salt and a salted password")
        h = _HASH[mechanism]
        cred = ScramCredential(bytes(salt), hashlib.new(h, hmac.digest(salted_password, b"Client Key", h)).digest(),
                               hmac.digest(salted_password, b"Server Key", h), iterations)

        def mutate(users):
            return {**users, name: {**users.get(name, {}), mechanism: cred}}, None
        self._doc.update(mutate)

    def remove_credential(self, name: str, mechanism: str) -> bool:
        """Remove one mechanism's credential of ``name`` (the user goes with its last); False when it had none."""
        mechanism = _canonical(mechanism, SCRAM_MECHANISMS, "SCRAM mechanism")

        def mutate(users):
            creds = users.get(name, {})
            if mechanism not in creds:
                return None, False
            rest = {m: c for m, c in creds.items() if m != mechanism}
            out = {n: c for n, c in users.items() if n != name}
            if rest:
                out[name] = rest
            return out, True
        return self._doc.update(mutate)

    def remove_user(self, name: str) -> bool:
        """Remove ``name``; returns False when there was no such user."""
        def mutate(users):
            if name not in users:
                return None, False
            return {n: c for n, c in users.items() if n != name}, True
        return self._doc.update(mutate)

    def users(self) -> list[str]:
        return sorted(self._doc.current())

    def mechanisms(self, name: str) -> dict[str, int]:
        """{mechanism: iterations} of ``name``'s credentials (empty for an unknown user)."""
        return {m: c.iterations for m, c in sorted(self._doc.current().get(name, {}).items())}

    def get(self, name: str, mechanism: str) -> ScramCredential | None:
        return self._doc.current().get(name, {}).get(mechanism)

    def verify_password(self, name: str, password: str) -> bool:
        """SASL/PLAIN: does ``password`` derive ``name``'s SCRAM-SHA-512 (else SCRAM-SHA-256) credential?

        An unknown user costs the same key derivation as a known one, so timing does not tell them apart.
        """
        creds = self._doc.current().get(name, {})
        mech = "SCRAM-SHA-512" if "SCRAM-SHA-512" in creds else "SCRAM-SHA-256"
        cred = creds.get(mech)
        if cred is None:
            self.mock_credential(name, "SCRAM-SHA-512").matches_password("SCRAM-SHA-512", password)
            return False
        return cred.matches_password(mech, password)

    def mock_credential(self, name: str, mechanism: str) -> ScramCredential:
        """A credential no password matches, with a stable salt per (name, mechanism)."""
        seed = hmac.digest(self._mock_secret, f"{mechanism}\0{name}".encode(), "sha512")
        size = _DIGEST_SIZE[mechanism]
        return ScramCredential(seed[:SALT_BYTES], secrets.token_bytes(size), secrets.token_bytes(size),
                               DEFAULT_ITERATIONS)


# ----------------------------------------------------------------------------------------------------------- SASL

_SASLNAME = r"(?:[^=,\x00]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>(?P<flag>n|y|p=[^,]*),(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>(?P<mext>m=[^,]*,)?n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?P<ext>(?:,[A-Za-z]+=[^,\x00]+)*))")
_EXTENSION = re.compile(r"[A-Za-z]+=[^,\x00]+")
_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")


def scram_escape(name: str) -> str:
    """A user name as a SCRAM saslname: "=" as =3D, "," as =2C."""
    return name.replace("=", "=3D").replace(",", "=2C")


def scram_unescape(saslname: str) -> str:
    return re.sub(r"=(2C|3D)", lambda m: "," if m.group(1) == "2C" else "=", saslname)


class SaslServer:
    """The server side of one SASL exchange on one connection: feed it the client's auth bytes with ``step``.

    PLAIN completes in one step (reply b""), SCRAM in two (server-first, then server-final). Failures raise
    SaslAuthenticationFailedError (code 58) naming the reason; a wrong password and an unknown user fail alike, at
    the same step and with the same message. After a failure every further step fails; a step after completion
    raises IllegalSaslStateError (34). Not thread-safe: one connection's requests are served in order.
    """

    def __init__(self, mechanism: str, credentials: CredentialStore, *, server_nonce: str | None = None):
        if mechanism not in MECHANISMS:
            raise UnsupportedSaslMechanismError(
                f"Unsupported SASL mechanism {mechanism!r}; the broker supports {', '.join(MECHANISMS)}")
        if server_nonce is not None and not _PRINTABLE_NONCE.fullmatch(server_nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self.mechanism = mechanism
        self.complete = False
        self.principal: str | None = None
        self._store = credentials
        self._server_nonce = server_nonce
        self._failed = False
        self._scram = None  # after client-first: user, gs2 header, client-first-bare, server-first, nonce, cred, known

    def step(self, client_bytes: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError(f"SASL/{self.mechanism} authentication is already complete")
        if self._failed:
            raise SaslAuthenticationFailedError(f"Authentication failed: SASL/{self.mechanism} exchange already "
                                                "failed on this connection")
        try:
            if self.mechanism == "PLAIN":
                return self._plain(bytes(client_bytes))
            if self._scram is None:
                return self._scram_first(bytes(client_bytes))
            return self._scram_final(bytes(client_bytes))
        except SaslAuthenticationFailedError:
            self._failed = True
            self._scram = None
            raise

    # workers -------------------------------------------------------------------------------------------------

    def _invalid_credentials(self) -> SaslAuthenticationFailedError:
        # Kafka's text for a SaslException at this point; says nothing of whether the user exists
        return SaslAuthenticationFailedError("Authentication failed during authentication due to invalid credentials "
                                             f"with SASL mechanism {self.mechanism}")

    @staticmethod
    def _fail(reason: str) -> SaslAuthenticationFailedError:
        return SaslAuthenticationFailedError(f"Authentication failed: {reason}")

    def _decode(self, data: bytes, what: str) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"{what} is not UTF-8") from None

    def _plain(self, data: bytes) -> bytes:
        tokens = self._decode(data, "SASL/PLAIN response").split("\0")
        if len(tokens) != 3:
            raise self._fail(f"invalid SASL/PLAIN response: expected 3 NUL-separated tokens, got {len(tokens)}")
        authzid, user, password = tokens
        if not user:
            raise self._fail("username not specified")
        if not password:
            raise self._fail("password not specified")
        if not self._store.verify_password(user, password):
            raise self._invalid_credentials()
        if authzid and authzid != user:
            raise self._fail("Client requested an authorization id that is different from username")
        self.complete, self.principal = True, f"User:{user}"
        return b""

    def _scram_first(self, data: bytes) -> bytes:
        m = _CLIENT_FIRST.fullmatch(self._decode(data, "SCRAM client first message"))
        if m is None:
            raise self._fail("invalid SCRAM client first message format")
        if m["flag"].startswith("p="):
            raise self._fail("channel binding is not supported (gs2 header must start with 'n,')")
        if m["mext"]:
            raise self._fail("unsupported mandatory SCRAM extension 'm'")
        extensions = dict(e.split("=", 1) for e in m["ext"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise self._fail("delegation token authentication (tokenauth) is not supported")
        user = scram_unescape(m["saslname"])
        if m["authzid"] is not None and scram_unescape(m["authzid"]) != user:
            raise self._fail("Client requested an authorization id that is different from username")
        cred = self._store.get(user, self.mechanism)
        known = cred is not None
        if not known:
            # carry on with a made-up credential and fail at the proof, as for a wrong password
            cred = self._store.mock_credential(user, self.mechanism)
        nonce = m["nonce"] + (self._server_nonce or secrets.token_urlsafe(24))
        server_first = f"r={nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        self._scram = (user, m["gs2"], m["bare"], server_first, nonce, cred, known)
        return server_first.encode("utf-8")

    def _scram_final(self, data: bytes) -> bytes:
        user, gs2, bare, server_first, nonce, cred, known = self._scram
        text = self._decode(data, "SCRAM client final message")
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        fields = without_proof.split(",")
        if (not sep or len(fields) < 2 or not fields[0].startswith("c=") or not fields[1].startswith("r=")
                or not all(_EXTENSION.fullmatch(f) for f in fields[2:])):
            raise self._fail("invalid SCRAM client final message format")
        if fields[1][2:] != nonce:
            raise self._fail("invalid client nonce in the final client message")
        if fields[0][2:] != base64.b64encode(gs2.encode("utf-8")).decode():
            raise self._fail("channel binding data does not match the gs2 header of the client first message")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error:
            raise self._fail("invalid SCRAM client final message format") from None
        h = _HASH[self.mechanism]
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        client_signature = hmac.digest(cred.stored_key, auth_message, h)
        if len(proof) != len(client_signature):
            raise self._invalid_credentials()
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(h, client_key).digest(), cred.stored_key) or not known:
            raise self._invalid_credentials()
        self._scram = None
        self.complete, self.principal = True, f"User:{user}"
        return b"v=" + base64.b64encode(hmac.digest(cred.server_key, auth_message, h))


# ----------------------------------------------------------------------------------------------------------- ACLs

def _check_principal(principal) -> str:
    # Kafka allows any principal type; the broker's authentication only ever makes User: principals, so an ACL
    # for 'user:alice' or 'Group:x' could never match: refused rather than kept as a silent no-op
    if not isinstance(principal, str) or not principal.startswith("User:") or len(principal) == 5:
        raise ValueError(f"principal {principal!r}: expected 'User:<name>' (or 'User:*' for every user)")
    return principal


def _check_host(host) -> str:
    if host == WILDCARD:
        return host
    try:
        return ipaddress.ip_address(str(host)).compressed
    except ValueError:
        raise ValueError(f"host {host!r}: expected an IP address or '*' (clients are matched by address, "
                         "host names never match)") from None


def _request_host(host: str) -> str:
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # a dual-stack listener reports IPv4 clients as ::ffff:a.b.c.d
    return addr.compressed


@dataclasses.dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` is ALLOWed/DENYed ``operation`` on resources of ``resource_type``
    named ``name`` (LITERAL: exactly that name, ``*`` = every name; PREFIXED: every name starting with it).

    Names are normalized to Kafka's enum spelling (READ, TOPIC, LITERAL, ALLOW) and validated like kafka-acls does.
    """

    principal: str
    host: str
    operation: str
    resource_type: str
    name: str
    pattern_type: str = "LITERAL"
    permission: str = "ALLOW"

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "principal", _check_principal(self.principal))
        set_(self, "host", _check_host(self.host))
        set_(self, "operation", _canonical(self.operation, OPERATIONS, "operation"))
        set_(self, "resource_type", _canonical(self.resource_type, RESOURCE_TYPES, "resource type"))
        set_(self, "pattern_type", _canonical(self.pattern_type, PATTERN_TYPES, "resource pattern type"))
        set_(self, "permission", _canonical(self.permission, PERMISSIONS, "permission"))
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("a resource name must be a non-empty string")
        if self.operation not in SUPPORTED_OPERATIONS[self.resource_type]:
            ops = ", ".join(sorted(SUPPORTED_OPERATIONS[self.resource_type]))
            raise ValueError(f"operation {self.operation} is not valid for {self.resource_type} (valid: {ops})")
        if self.resource_type == "CLUSTER" and (self.name != CLUSTER_NAME or self.pattern_type != "LITERAL"):
            raise ValueError(f"the CLUSTER resource is the literal name {CLUSTER_NAME!r}")
        if self.pattern_type == "PREFIXED" and self.name == WILDCARD:
            raise ValueError("a PREFIXED '*' matches nothing: use a LITERAL '*' for every resource")

    def sort_key(self):
        return (self.resource_type, self.pattern_type, self.name, self.principal, self.host, self.permission,
                OPERATIONS.index(self.operation))

    def pattern_str(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type}, name={self.name}, patternType={self.pattern_type})"

    def entry_str(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation}, "
                f"permissionType={self.permission})")

    def to_json(self) -> dict:
        return {"resourceType": _JSON_RESOURCE[self.resource_type], "name": self.name,
                "patternType": self.pattern_type, "principal": self.principal, "host": self.host,
                "operation": _JSON_OPERATION[self.operation], "permissionType": _JSON_PERMISSION[self.permission]}

    @classmethod
    def from_json(cls, entry: dict) -> AclBinding:
        return cls(principal=entry["principal"], host=entry["host"], operation=entry["operation"],
                   resource_type=entry["resourceType"], name=entry["name"], pattern_type=entry["patternType"],
                   permission=entry["permissionType"])


@dataclasses.dataclass(frozen=True)
class AclBindingFilter:
    """Selects ACLs for ``list``/``remove`` (Kafka's AclBindingFilter): None (or ANY) matches every value.

    ``pattern_type`` MATCH selects every ACL that applies to the resource ``name``: its literal ACLs, the literal
    ``*`` ACLs and the PREFIXED ACLs whose prefix starts ``name``.
    """

    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    resource_type: str | None = None
    name: str | None = None
    pattern_type: str | None = None
    permission: str | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        if self.principal is not None:
            set_(self, "principal", _check_principal(self.principal))
        if self.host is not None:
            set_(self, "host", _check_host(self.host))
        for field, allowed, what in (("operation", OPERATIONS, "operation"),
                                     ("resource_type", RESOURCE_TYPES, "resource type"),
                                     ("pattern_type", (*PATTERN_TYPES, "MATCH"), "resource pattern type"),
                                     ("permission", PERMISSIONS, "permission")):
            value = getattr(self, field)
            if value is not None:
                set_(self, field, None if str(value).upper() == "ANY" else _canonical(value, allowed, what))
        if self.pattern_type == "MATCH" and self.name is None:
            set_(self, "pattern_type", None)

    def matches(self, b: AclBinding) -> bool:
        if ((self.principal is not None and b.principal != self.principal)
                or (self.host is not None and b.host != self.host)
                or (self.operation is not None and b.operation != self.operation)
                or (self.resource_type is not None and b.resource_type != self.resource_type)
                or (self.permission is not None and b.permission != self.permission)):
            return False
        if self.pattern_type == "MATCH":
            if b.pattern_type == "LITERAL":
                return b.name == self.name or b.name == WILDCARD
            return self.name.startswith(b.name)
        if self.pattern_type is not None and b.pattern_type != self.pattern_type:
            return False
        return self.name is None or b.name == self.name


def _parse_acls(doc) -> tuple:
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("acls"), list):
        raise ValueError('expected {"version": 1, "acls": [...]}')
    return tuple(sorted({AclBinding.from_json(e) for e in doc["acls"]}, key=AclBinding.sort_key))


def _dump_acls(acls: tuple) -> dict:
    return {"version": 1, "acls": [b.to_json() for b in acls]}


class _AclIndex:
    """ACLs by resource: literal name (``*`` included) -> bindings, and the PREFIXED bindings per resource type."""

    def __init__(self, acls):
        self.literal: dict[tuple[str, str], list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}
        for b in acls:
            if b.pattern_type == "LITERAL":
                self.literal.setdefault((b.resource_type, b.name), []).append(b)
            else:
                self.prefixed.setdefault(b.resource_type, []).append(b)

    def matching(self, resource_type: str, name: str) -> list[AclBinding]:
        found = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self.literal.get((resource_type, WILDCARD), ())
        found += [b for b in self.prefixed.get(resource_type, ()) if name.startswith(b.name)]
        return found


class Authorizer:
    """Kafka's ACL authorizer over ``acls.json``.

    ``authorize`` decides like Kafka's AclAuthorizer/StandardAuthorizer: super users are always allowed; the ACLs
    whose pattern matches the resource (literal name, literal ``*``, PREFIXED prefixes) are looked at; when there
    is none, ``allow_everyone_if_no_acl_found`` decides; otherwise any matching DENY for the principal (or
    ``User:*``) and host (or ``*``) naming the operation or ALL denies, and else an ALLOW naming the operation, ALL
    or an operation that implies it (READ/WRITE/DELETE/ALTER -> DESCRIBE, ALTER_CONFIGS -> DESCRIBE_CONFIGS)
    allows. Nothing else is allowed.

    Thread-safe; process-safe like CredentialStore (changes made by another process are seen at the next call).
    Decisions are cached until the ACLs change.
    """

    def __init__(self, path, super_users=(), allow_everyone_if_no_acl_found: bool = False,
                 check_interval_s: float = 0.0):
        if isinstance(super_users, str):
            super_users = [s.strip() for s in re.split(r"[;,]", super_users) if s.strip()]
        self.super_users = frozenset(_check_principal(p) for p in super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        # check_interval_s: how long a decision may trust the last look at the file (0: look every time, ~3 us)
        self._doc = _JsonDocument(path, "ACLs", _parse_acls, _dump_acls, (), check_interval_s)
        self._lock = threading.Lock()
        self._indexed = None
        self._index = _AclIndex(())
        self._cache: dict[tuple, bool] = {}

    @property
    def path(self) -> Path:
        return self._doc.path

    def authorize(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        """May ``principal`` connected from ``host`` (an IP address) do ``operation`` on the named resource?"""
        if operation not in _GRANTED_BY:
            operation = _canonical(operation, OPERATIONS, "operation")
        if resource_type not in SUPPORTED_OPERATIONS:
            resource_type = _canonical(resource_type, RESOURCE_TYPES, "resource type")
        with self._lock:
            self._refresh()
            key = (principal, host, operation, resource_type, name)
            decision = self._cache.get(key)
            if decision is None:
                if len(self._cache) >= _DECISION_CACHE_MAX:
                    self._cache.clear()
                decision = self._cache[key] = self._decide(principal, host, operation, resource_type, name)
            return decision

    def authorize_by_resource_type(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        """Is there a resource of ``resource_type`` that ``principal`` may ``operation``? (Kafka's
        authorizeByResourceType, used for InitProducerId without a transactional id: IDEMPOTENT_WRITE on the
        cluster or WRITE on any topic.) Only the operation itself and ALL count here; no implied operations."""
        operation = _canonical(operation, OPERATIONS, "operation")
        resource_type = _canonical(resource_type, RESOURCE_TYPES, "resource type")
        with self._lock:
            self._refresh()
            # a name no literal or PREFIXED ACL can name: only super users, ``*`` ACLs and the no-ACL rule decide
            if self._decide(principal, host, operation, resource_type, "\0"):
                return True
            req_host = _request_host(host)
            deny = {"LITERAL": set(), "PREFIXED": set()}
            allow = {"LITERAL": set(), "PREFIXED": set()}
            for b in self._indexed:
                if (b.resource_type != resource_type or b.operation not in (operation, "ALL")
                        or b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (req_host, WILDCARD)):
                    continue
                if b.permission == "DENY":
                    if b.pattern_type == "LITERAL" and b.name == WILDCARD:
                        return False
                    deny[b.pattern_type].add(b.name)
                elif b.pattern_type == "LITERAL" and b.name == WILDCARD:
                    return True
                else:
                    allow[b.pattern_type].add(b.name)
            # an allowed name or prefix counts unless a deny covers it (the same literal, or a denied prefix of it)
            for pattern_type, names in allow.items():
                for allowed in names:
                    if pattern_type == "LITERAL" and allowed in deny["LITERAL"]:
                        continue
                    if not any(allowed.startswith(p) for p in deny["PREFIXED"]):
                        return True
            return False

    def add(self, *bindings: AclBinding) -> int:
        """Add ACLs (already present ones are kept once); returns how many were new."""
        for b in bindings:
            if not isinstance(b, AclBinding):
                raise TypeError(f"expected AclBinding, got {type(b).__name__}")

        def mutate(acls):
            new = set(bindings) - set(acls)
            if not new:
                return None, 0
            return tuple(sorted(set(acls) | new, key=AclBinding.sort_key)), len(new)
        return self._doc.update(mutate)

    def remove(self, filter) -> int:
        """Remove the ACLs an AclBindingFilter selects (or one exact AclBinding); returns how many went."""
        if isinstance(filter, AclBinding):
            match = filter.__eq__
        elif isinstance(filter, AclBindingFilter):
            match = filter.matches
        else:
            raise TypeError(f"expected AclBindingFilter or AclBinding, got {type(filter).__name__}")

        def mutate(acls):
            kept = tuple(b for b in acls if not match(b))
            return (kept if len(kept) != len(acls) else None), len(acls) - len(kept)
        return self._doc.update(mutate)

    def list(self, filter: AclBindingFilter | None = None) -> list[AclBinding]:
        acls = self._doc.current()
        return [b for b in acls if filter is None or filter.matches(b)]

    # workers (lock held) ---------------------------------------------------------------------------------------

    def _refresh(self) -> None:
        acls = self._doc.current()
        if acls is not self._indexed:
            self._index, self._indexed = _AclIndex(acls), acls
            self._cache.clear()

    def _decide(self, principal, host, operation, resource_type, name) -> bool:
        if principal in self.super_users:
            return True
        acls = self._index.matching(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        host = _request_host(host)
        granting = _GRANTED_BY[operation]
        allowed = False
        for b in acls:
            if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD):
                continue
            if b.permission == "DENY":
                if b.operation == operation or b.operation == "ALL":
                    return False
            elif b.operation in granting:
                allowed = True
        return allowed


# ------------------------------------------------------------------------------------------------------------ CLI

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like the rest of the kafkalog command, not argparse's usage
        raise _UsageError(message)


def _run(parser: _Parser, argv, command) -> int:
    try:
        args = parser.parse_args(list(argv))
    except _UsageError as e:
        print(f"kafkalog: error: {parser.prog}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else EXIT_OK
    try:
        return command(args)
    except (KafkaError, ValueError, OSError) as e:
        print(f"kafkalog: error: {e}", file=sys.stderr)
        return EXIT_ERROR


def users_main(argv, users_path) -> int:
    """``kafkalog users add NAME [--password P | --password-stdin] [--mechanism M ...] [--iterations N]``,
    ``users remove NAME``, ``users list``. Errors are one line on stderr: exit 1 (bad value), 2 (bad syntax)."""
    parser = _Parser(prog="kafkalog users", description="SASL/SCRAM users of the broker (stored as Kafka's salted "
                     f"SCRAM credentials in {users_path}, never as passwords; PLAIN checks the same credentials)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("add", help="add a user or set its password")
    p.add_argument("name")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--password", help="the password (visible to other local users in the process list)")
    g.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    p.add_argument("--mechanism", action="append", metavar="M",
                   help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (repeatable; default both)")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})")
    p = sub.add_parser("remove", help="remove a user")
    p.add_argument("name")
    sub.add_parser("list", help="users and their SCRAM mechanisms")

    def command(args) -> int:
        store = CredentialStore(users_path)
        if args.command == "list":
            users = store.users()
            if not users:
                print(f"no users in {store.path}", file=sys.stderr)
            for name in users:
                mechs = ", ".join(f"{m}=iterations={i}" for m, i in store.mechanisms(name).items())
                print(f"{name}\t{mechs}")
            return EXIT_OK
        if args.command == "remove":
            if not store.remove_user(args.name):
                raise ValueError(f"no such user {args.name!r} in {store.path}")
            print(f"removed user {args.name!r}")
            return EXIT_OK
        check_user_name(args.name)
        mechanisms = []
        for m in args.mechanism or SCRAM_MECHANISMS:
            if m.upper() == "PLAIN":
                raise ValueError("PLAIN needs no credential of its own: it is checked against the SCRAM credentials")
            mechanisms.append(_canonical(m, SCRAM_MECHANISMS, "SCRAM mechanism"))
        check_iterations(args.iterations)
        password = _read_password(args)
        new = store.add_user(args.name, password, mechanisms, args.iterations)
        print(f"{'added' if new else 'updated'} user {args.name!r}: {', '.join(dict.fromkeys(mechanisms))} "
              f"({args.iterations} iterations)")
        return EXIT_OK

    return _run(parser, argv, command)


def _read_password(args) -> str:
    if args.password is not None:
        password = args.password
    elif args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin is not None and sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise ValueError("the passwords do not match")
    else:
        raise ValueError("no password: give --password or --password-stdin")
    if not password:
        raise ValueError("the password is empty")
    return password


def acls_main(argv, acls_path) -> int:
    """``kafkalog acls --add|--remove|--list`` with kafka-acls.sh's flags. Errors are one line on stderr: exit 1
    (bad value), 2 (bad syntax)."""
    parser = _Parser(prog="kafkalog acls", description=f"the broker's ACLs (Kafka's model), kept in {acls_path}")
    g = parser.add_mutually_exclusive_group(required=True)
    g.add_argument("--add", dest="action", action="store_const", const="add")
    g.add_argument("--remove", dest="action", action="store_const", const="remove")
    g.add_argument("--list", dest="action", action="store_const", const="list")
    parser.add_argument("--principal", action="append", default=[], metavar="P",
                        help="User:name or User:* (ALLOW, or DENY with --deny; repeatable)")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="P", help="an ALLOW principal")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="P", help="a DENY principal")
    parser.add_argument("--host", action="append", default=[], metavar="H",
                        help="client IP address (default * = any; repeatable)")
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, "
                        "ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL (repeatable)")
    parser.add_argument("--topic", action="append", default=[], metavar="T", help="a topic (* = every topic)")
    parser.add_argument("--group", action="append", default=[], metavar="G", help="a consumer group (* = every group)")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", metavar="TYPE",
                        help="literal (default) or prefixed; --list/--remove also take any and match")
    perm = parser.add_mutually_exclusive_group()
    perm.add_argument("--deny", action="store_true", help="--principal gets DENY instead of ALLOW")
    perm.add_argument("--allow", action="store_true", help="--remove/--list: only ALLOW ACLs of --principal")

    def command(args) -> int:
        authorizer = Authorizer(acls_path)
        resources = ([("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
                     + [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
                     + ([("CLUSTER", CLUSTER_NAME)] if args.cluster else []))
        pattern = (args.resource_pattern_type or "LITERAL").upper()
        if pattern not in ("LITERAL", "PREFIXED", "ANY", "MATCH"):
            raise ValueError(f"--resource-pattern-type {args.resource_pattern_type!r}: expected literal, prefixed, "
                             "any or match")
        default_perm = "DENY" if args.deny else ("ALLOW" if args.allow else None)
        principals = ([(p, default_perm) for p in args.principal] + [(p, "ALLOW") for p in args.allow_principal]
                      + [(p, "DENY") for p in args.deny_principal])
        if args.action == "add":
            return _acls_add(authorizer, args, resources, pattern, principals)
        if args.action == "remove":
            if not resources:
                raise ValueError("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
            filters = _acl_filters(args, resources, pattern, principals, default_perm)
            removed = sum(authorizer.remove(f) for f in filters)
            print(f"removed {removed} ACL{'s' if removed != 1 else ''}")
            return EXIT_OK
        if resources:
            filters = _acl_filters(args, resources, pattern, principals, default_perm)
        else:
            filters = _acl_filters(args, [(None, None)], "ANY", principals, default_perm)
        found = [b for b in authorizer.list() if any(f.matches(b) for f in filters)]
        _print_acls(found, "Current ACLs for resource")
        return EXIT_OK

    return _run(parser, argv, command)


def _acls_add(authorizer, args, resources, pattern, principals) -> int:
    if args.allow:
        raise ValueError("--allow is for --remove/--list; --add makes ALLOW ACLs unless --deny")
    if not principals:
        raise ValueError("--add needs --principal (or --allow-principal / --deny-principal)")
    if not args.operation:
        raise ValueError("--add needs --operation")
    if not resources:
        raise ValueError("--add needs a resource: --topic, --group, --transactional-id or --cluster")
    if pattern not in PATTERN_TYPES:
        raise ValueError(f"--add takes --resource-pattern-type literal or prefixed, not {pattern.lower()}")
    bindings = []
    for rtype, name in resources:
        for principal, permission in principals:
            for host in args.host or [WILDCARD]:
                for op in args.operation:
                    bindings.append(AclBinding(principal, host, op, rtype, name,
                                               "LITERAL" if rtype == "CLUSTER" else pattern, permission or "ALLOW"))
    added = authorizer.add(*bindings)
    _print_acls(list(dict.fromkeys(bindings)), "Adding ACLs for resource")
    print(f"added {added} ACL{'s' if added != 1 else ''} ({len(bindings) - added} already present)")
    return EXIT_OK


def _acl_filters(args, resources, pattern, principals, default_perm) -> list[AclBindingFilter]:
    pattern_type = None if pattern == "ANY" else pattern
    out = []
    for rtype, name in resources:
        for principal, permission in principals or [(None, default_perm)]:
            for host in args.host or [None]:
                for op in args.operation or [None]:
                    out.append(AclBindingFilter(principal=principal, host=host, operation=op, resource_type=rtype,
                                                name=name, pattern_type=None if rtype is None else pattern_type,
                                                permission=permission))
    return out


def _print_acls(bindings, title: str) -> None:
    by_pattern: dict[str, list[AclBinding]] = {}
    for b in sorted(bindings, key=AclBinding.sort_key):
        by_pattern.setdefault(b.pattern_str(), []).append(b)
    for pattern, entries in by_pattern.items():
        print(f"{title} `{pattern}`:")
        for b in entries:
            print(f"\t{b.entry_str()}")
        print()
