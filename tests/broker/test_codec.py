"""The table codec (kafkalog.broker.protocol) against kio 0.6.5 as the oracle, plus bad input and fuzzing.

For every (API, version) kafkalog speaks, a request and a response with non-default values in every field are
encoded by us, parsed by kio and compared field by field, re-encoded by kio (must be byte-equal to ours), and kio's
bytes are decoded by us. The dict <-> kio dataclass converter is generic, driven by kio's dataclass fields.
"""

import dataclasses
import datetime
import io
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field

from kafkalog.broker import protocol, schemas
from kafkalog.errors import InvalidRequestError, UnsupportedVersionError

CASES = [(key, v) for key, (lo, hi) in protocol.SUPPORTED.items() for v in range(lo, hi + 1)]
CASE_IDS = [f"{protocol.API_NAMES[k]}-v{v}" for k, v in CASES]
# versions newer than kio 0.6.5's schemas (DeleteGroups v3, Kafka 4.4: a per-group ErrorMessage; TxnOffsetCommit v6,
# KIP-1319's topic ids): their bytes are checked against Apache Kafka 4.4 itself (tests/compat/test_wire_versions.py,
# tests/compat/test_transactions_v2.py); kio must not know them (else drop here)
KIO_MISSING = {(42, 3), (28, 6), (18, 5)}
KIO_CASES = [c for c in CASES if c not in KIO_MISSING]
KIO_IDS = [f"{protocol.API_NAMES[k]}-v{v}" for k, v in KIO_CASES]

# versions beyond SUPPORTED whose fields are those of the table's top version, only flexible: proves that extending a
# table is all a later flexible version needs (compact types, tag buffers, response header v1)
FLEX_EXTRA = [(11, 6, True), (11, 6, False), (12, 4, True), (12, 4, False), (14, 4, True),
              (14, 4, False), (21, 2, True), (21, 2, False), (22, 2, True), (22, 2, False), (36, 2, True),
              (36, 2, False), (48, 1, True), (48, 1, False), (49, 1, True), (49, 1, False)]

_TIME_TYPES = ("timedelta_i32", "timedelta_i64", "datetime_i64")
_ERROR_CODES = [3, 6, 7, 35, 42, 79]


# ---------------------------------------------------------------------------------------------------------------------
# sample bodies from the schema table (independent of the codec's compiled form)

def _in(spec, version):
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


def _scalar(typ, name, n, default):
    n %= 97
    if name.endswith("error_code"):
        return _ERROR_CODES[n % len(_ERROR_CODES)]
    if name.endswith("_ms") and typ in ("int32", "int64"):
        return 1_700_000_000_123 + n if name.startswith("log_append_time") else 30_000 + n
    return {
        "int8": lambda: 3 + n,
        "int16": lambda: -300 - n,
        "int32": lambda: 70_000 + 13 * n,
        "int64": lambda: 2**40 + 7 * n,
        "uint16": lambda: 40_000 + n,
        "float64": lambda: 1.5 + n,
        "bool": lambda: not default if isinstance(default, bool) else True,
        "string": lambda: f"tøpic-ü-{name}-{n}",
        "bytes": lambda: bytes(range(n, n + 5)) * 3,
        "records": lambda: b"\x00batch" + bytes([n]) * (20 + n),
        "uuid": lambda: uuid.UUID(int=n + 1),
    }[typ]()


def sample(rows, version, nulls, n=0, depth=0):
    """A body for one version: every present, untagged field set to a non-default value (or None if ``nulls``)."""
    out = {}
    for i, row in enumerate(rows):
        name, typ, versions, opts = row[:4]
        sub = row[4] if len(row) > 4 else None
        if not _in(versions, version) or ("tag" in opts and _in(opts.get("tagged"), version)):
            continue
        k = n * 10 + i
        if nulls and _in(opts.get("nullable"), version):
            out[name] = None
        elif typ.startswith("[]"):
            count = 3 if depth == 0 else 2
            if sub is not None:
                out[name] = [sample(sub, version, nulls and j == 1, k + j, depth + 1) for j in range(count)]
            else:
                out[name] = [_scalar(typ[2:], name, k + j, None) for j in range(count)]
        elif sub is not None:
            out[name] = sample(sub, version, nulls, k, depth + 1)
        else:
            out[name] = _scalar(typ, name, k, opts.get("default"))
    return out


# ---------------------------------------------------------------------------------------------------------------------
# generic converter: our dicts <-> kio's frozen dataclasses

def _our_name(f):
    return f.name + "_ms" if f.metadata.get("kafka_type") in _TIME_TYPES else f.name


def _prim_to_kio(kt, value):
    if value is None:
        return None
    if kt in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if kt == "datetime_i64":
        return None if value == -1 else datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    if kt == "error_code":
        return ErrorCode(value)
    if kt in ("bytes", "records"):
        return bytes(value)
    return value


def to_kio(cls, d):
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("tag") is not None:
            # a tagged field: kio's default, unless the test set ours (only our schemas' tagged fields can be)
            if d.get(_our_name(f)) is None or d[_our_name(f)] == []:
                continue
            fc = classify_field(f)
            value = d[_our_name(f)]
            if isinstance(fc, EntityTupleField):
                kwargs[f.name] = tuple(to_kio(fc.type_, x) for x in value)
            else:
                kwargs[f.name] = _prim_to_kio(f.metadata.get("kafka_type"), value)
            continue
        value = d[_our_name(f)]
        fc = classify_field(f)
        kt = f.metadata.get("kafka_type")
        if isinstance(fc, EntityTupleField):
            kwargs[f.name] = None if value is None else tuple(to_kio(fc.type_, x) for x in value)
        elif isinstance(fc, EntityField):
            kwargs[f.name] = None if value is None else to_kio(fc.type_, value)
        elif isinstance(fc, PrimitiveTupleField):
            kwargs[f.name] = None if value is None else tuple(_prim_to_kio(kt, x) for x in value)
        else:
            kwargs[f.name] = _prim_to_kio(kt, value)
    return cls(**kwargs)


def _prim_from_kio(kt, value):
    if kt in ("timedelta_i32", "timedelta_i64"):
        return round(value.total_seconds() * 1000)
    if kt == "datetime_i64":
        return -1 if value is None else round(value.timestamp() * 1000)
    if isinstance(value, ErrorCode):
        return value.value
    if isinstance(value, bytes):
        return bytes(value)
    return value


def from_kio(obj):
    out = {}
    for f in dataclasses.fields(obj):
        if f.metadata.get("tag") is not None:
            continue  # a tagged field: compared by the tests that set one
        value = getattr(obj, f.name)
        fc = classify_field(f)
        kt = f.metadata.get("kafka_type")
        if value is None and kt != "datetime_i64":
            out[_our_name(f)] = None
        elif isinstance(fc, EntityTupleField):
            out[_our_name(f)] = [from_kio(x) for x in value]
        elif isinstance(fc, EntityField):
            out[_our_name(f)] = from_kio(value)
        elif isinstance(fc, PrimitiveTupleField):
            out[_our_name(f)] = [_prim_from_kio(kt, x) for x in value]
        else:
            out[_our_name(f)] = _prim_from_kio(kt, value)
    return out


def plain(value):
    """Decoded dicts hold memoryviews for bytes fields: compare them as bytes."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return value.tobytes()
    return value


def restrict(ours, theirs):
    """Our decoded dict cut to the keys kio has (ours also carries defaults of fields this version lacks)."""
    if isinstance(theirs, dict):
        assert set(theirs) <= set(ours), (set(theirs) - set(ours))
        return {k: restrict(ours[k], v) for k, v in theirs.items()}
    if isinstance(theirs, list) and isinstance(ours, list) and len(ours) == len(theirs):
        return [restrict(a, b) for a, b in zip(ours, theirs)]
    return ours


def kio_request_bytes(cls, obj, key, version, correlation_id, client_id):
    buf = io.BytesIO()
    header_cls = cls.__header_schema__
    entity_writer(header_cls)(buf, header_cls(request_api_key=key, request_api_version=version,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buf, obj)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def kio_response_bytes(cls, obj, correlation_id):
    buf = io.BytesIO()
    header_cls = cls.__header_schema__
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(cls)(buf, obj)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def _table(key):
    return schemas.APIS[key]


@pytest.fixture
def flex_extra(monkeypatch):
    """Register the FLEX_EXTRA versions the way extending a table would (same rows, a higher version)."""
    for key, version, response in FLEX_EXTRA:
        api = _table(key)
        rows = api["response" if response else "request"]
        name = api["name"] + ("Response" if response else "Request")
        monkeypatch.setitem(protocol._MESSAGES, (key, version, response), protocol._Struct(name, rows, version, True))
    for key in {k for k, _, _ in FLEX_EXTRA}:
        lo, _ = protocol.SUPPORTED[key]
        monkeypatch.setitem(protocol.SUPPORTED, key, (lo, max(v for k, v, _ in FLEX_EXTRA if k == key)))


# ---------------------------------------------------------------------------------------------------------------------
# oracle round trips

def check_request(key, version, nulls):
    body = sample(_table(key)["request"], version, nulls)
    ours = protocol.encode_request(key, version, 12345, "clïent-1", body)
    assert struct.unpack_from(">i", ours)[0] == len(ours) - 4

    cls = load_request_schema(key, version)
    header, pos = entity_reader(cls.__header_schema__)(ours[4:], 0)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (
        key, version, 12345, "clïent-1")
    parsed, size = entity_reader(cls)(ours[4:], pos)  # kio returns the bytes it consumed
    assert pos + size == len(ours) - 4
    assert parsed == to_kio(cls, {**protocol.decode_request(key, version, ours[4:], pos), **body})
    assert restrict(body, from_kio(parsed)) == from_kio(parsed)

    theirs = kio_request_bytes(cls, parsed, key, version, 12345, "clïent-1")
    assert theirs == ours

    h, offset = protocol.read_request_header(theirs[4:])
    assert h == protocol.RequestHeader(key, version, 12345, "clïent-1")
    assert offset == pos
    decoded = plain(protocol.decode_request(key, version, theirs[4:], offset))
    assert restrict(decoded, plain(body)) == plain(body)
    assert restrict(decoded, from_kio(parsed)) == from_kio(parsed)


def check_response(key, version, nulls):
    body = sample(_table(key)["response"], version, nulls)
    chunks = protocol.encode_response(key, version, 777, body)
    ours = b"".join(chunks)
    assert struct.unpack_from(">i", ours)[0] == len(ours) - 4

    cls = load_response_schema(key, version)
    header, pos = entity_reader(cls.__header_schema__)(ours[4:], 0)
    assert header.correlation_id == 777
    parsed, size = entity_reader(cls)(ours[4:], pos)  # kio returns the bytes it consumed
    assert pos + size == len(ours) - 4
    corr, decoded = protocol.decode_response(key, version, ours[4:])
    assert corr == 777
    assert parsed == to_kio(cls, {**decoded, **body})

    theirs = kio_response_bytes(cls, parsed, 777)
    assert theirs == ours
    corr, decoded = protocol.decode_response(key, version, theirs[4:])
    decoded = plain(decoded)
    assert restrict(decoded, plain(body)) == plain(body)
    assert restrict(decoded, from_kio(parsed)) == from_kio(parsed)


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize(("key", "version"), KIO_CASES, ids=KIO_IDS)
def test_request_equals_kio(key, version, nulls):
    check_request(key, version, nulls)


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize(("key", "version"), KIO_CASES, ids=KIO_IDS)
def test_response_equals_kio(key, version, nulls):
    check_response(key, version, nulls)


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize(("key", "version", "response"), FLEX_EXTRA,
                         ids=[f"{protocol.API_NAMES[k]}-v{v}-{'resp' if r else 'req'}" for k, v, r in FLEX_EXTRA])
def test_flexible_extension_equals_kio(flex_extra, key, version, response, nulls):
    assert protocol.is_flexible(key, version)
    (check_response if response else check_request)(key, version, nulls)


def test_every_supported_version_is_tested_and_kio_knows_it():
    for key, version in KIO_CASES:
        assert load_request_schema(key, version).__api_key__ == key
        assert load_response_schema(key, version).__api_key__ == key
    for key, version in KIO_MISSING:
        with pytest.raises(Exception, match="entity path"):
            load_response_schema(key, version)
    assert protocol.SUPPORTED == {
        0: (3, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4),
        13: (0, 5), 14: (0, 5), 17: (0, 1), 18: (0, 5), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4),
        36: (0, 2), 48: (0, 1), 49: (0, 1),
        # transactions (KIP-98/447, KIP-890 parts 1 and 2, and KIP-664's tooling APIs)
        24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 2), 28: (0, 6), 61: (0, 0), 65: (0, 0), 66: (0, 2),
        # the admin APIs (flexible versions included)
        15: (0, 6), 16: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 33: (0, 2), 35: (1, 5), 37: (0, 3),
        42: (0, 3), 44: (0, 1), 47: (0, 0), 50: (0, 0), 51: (0, 0), 60: (0, 2), 75: (0, 0), 43: (0, 2), 45: (0, 1),
        46: (0, 0), 57: (0, 2),
        # KIP-848 consumer groups
        68: (0, 1), 69: (0, 1),
        # KIP-932 share groups
        76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0)}
    assert protocol.API_NAMES[0] == "Produce" and protocol.API_NAMES[49] == "AlterClientQuotas"


# ---------------------------------------------------------------------------------------------------------------------
# headers, flexible details, defaults, chunks

def test_api_versions_v3_request_header_v2_and_response_header_v0():
    frame = protocol.encode_request(18, 3, 9, "c", {"client_software_name": "kl", "client_software_version": "1"})
    # header v2: int16 client id (never compact) then an empty tag buffer
    assert frame[4:] == b"\x00\x12\x00\x03\x00\x00\x00\x09\x00\x01c" + b"\x00" + b"\x03kl\x021\x00"
    out = b"".join(protocol.encode_response(18, 3, 9, {"api_keys": [{"api_key": 1, "min_version": 4,
                                                                    "max_version": 11}]}))
    # response header v0 (no tag buffer), then compact array, tag buffers, no tagged field ever
    assert out == (struct.pack(">ii", 19, 9) + b"\x00\x00" + b"\x02" + b"\x00\x01\x00\x04\x00\x0b\x00"
                   + b"\x00\x00\x00\x00" + b"\x00")


def test_response_header_v1_for_flexible_versions_other_than_api_versions(flex_extra):
    out = b"".join(protocol.encode_response(12, 4, 5, {"error_code": 27}))
    assert out == struct.pack(">ii", 12, 5) + b"\x00" + struct.pack(">ih", 0, 27) + b"\x00"
    assert protocol.decode_response(12, 4, out[4:]) == (5, {"throttle_time_ms": 0, "error_code": 27})


def test_tagged_fields_are_read_and_written_as_kafka():
    # header v2 with one tagged field (tag 7, 3 bytes), body with two tagged fields
    frame = (b"\x00\x12\x00\x04\x00\x00\x00\x09\x00\x01c" + b"\x01\x07\x03abc"
             + b"\x03kl\x021" + b"\x02\x00\x01z\x05\x02hi")
    header, offset = protocol.read_request_header(frame)
    assert header == protocol.RequestHeader(18, 4, 9, "c")
    assert protocol.decode_request(18, 4, frame, offset) == {"client_software_name": "kl",
                                                             "client_software_version": "1", "cluster_id": None,
                                                             "node_id": -1}
    # a response with kio writing non-default tagged fields (SupportedFeatures, FinalizedFeaturesEpoch)
    cls = load_response_schema(18, 3)
    body = sample(_table(18)["response"], 3, False)
    d = {**protocol.decode_response(18, 3, b"".join(protocol.encode_response(18, 3, 1, body))[4:])[1], **body}
    d["supported_features"] = [{"name": "metadata.version", "min_version": 1, "max_version": 20}]
    d["finalized_features_epoch"] = 42
    theirs = kio_response_bytes(cls, to_kio(cls, d), 1)
    _, decoded = protocol.decode_response(18, 3, theirs[4:])
    assert decoded["api_keys"] == body["api_keys"]
    # known tags are read; the ones at their default (FinalizedFeatures, ZkMigrationReady) are absent in the bytes
    assert decoded["supported_features"] == d["supported_features"] and decoded["finalized_features_epoch"] == 42
    assert decoded["finalized_features"] == [] and decoded["zk_migration_ready"] is False
    # and written byte for byte as kio (Kafka's generated code) writes them: non-default tags only, in tag order
    d["finalized_features"] = [{"name": "transaction.version", "max_version_level": 2, "min_version_level": 2}]
    d["zk_migration_ready"] = True
    assert b"".join(protocol.encode_response(18, 3, 1, d)) == kio_response_bytes(cls, to_kio(cls, d), 1)
    d["finalized_features_epoch"] = -1
    ours = b"".join(protocol.encode_response(18, 3, 1, d))
    assert ours == kio_response_bytes(cls, to_kio(cls, d), 1)
    assert protocol.decode_response(18, 3, ours[4:])[1]["finalized_features"] == d["finalized_features"]
    # a known tag whose size disagrees with its value is refused
    d["finalized_features_epoch"] = 42
    ours = b"".join(protocol.encode_response(18, 3, 1, d))
    epoch = b"\x01\x08" + struct.pack(">q", 42)
    assert ours.count(epoch) == 1
    bad = ours.replace(epoch, b"\x01\x09" + struct.pack(">q", 42) + b"\x00")
    with pytest.raises(InvalidRequestError, match="tagged field 1 is 9 bytes"):
        protocol.decode_response(18, 3, bad[4:])


def test_unknown_key_or_version_header_is_v1():
    # a flexible-looking ApiVersions v9 header is parsed as v1: the caller answers v0 with UNSUPPORTED_VERSION
    frame = b"\x00\x12\x00\x09\x00\x00\x00\x01\xff\xff\x01\x02"
    assert protocol.read_request_header(frame) == (protocol.RequestHeader(18, 9, 1, None), 10)
    assert protocol.read_request_header(b"\x03\xe7\x00\x00\x00\x00\x00\x02\x00\x00") == (
        protocol.RequestHeader(999, 0, 2, ""), 10)
    with pytest.raises(UnsupportedVersionError, match="ApiVersions v9"):
        protocol.decode_request(18, 9, frame, 10)
    with pytest.raises(UnsupportedVersionError, match="999"):
        protocol.decode_request(999, 0, frame, 10)
    with pytest.raises(UnsupportedVersionError, match="Produce v2"):
        protocol.encode_response(0, 2, 1, {})


def test_is_flexible():
    assert protocol.is_flexible(18, 3) and protocol.is_flexible(18, 4) and not protocol.is_flexible(18, 2)
    assert not protocol.is_flexible(0, 7) and protocol.is_flexible(0, 9)
    assert not protocol.is_flexible(17, 1) and not protocol.is_flexible(999, 5)


def test_missing_keys_take_schema_defaults():
    _, d = protocol.decode_response(1, 11, b"".join(protocol.encode_response(1, 11, 1, {
        "responses": [{"topic": "t", "partitions": [{"partition_index": 2}]}]}))[4:])
    p = d["responses"][0]["partitions"][0]
    assert (p["last_stable_offset"], p["log_start_offset"], p["preferred_read_replica"]) == (-1, -1, -1)
    assert (p["aborted_transactions"], p["records"], p["error_code"]) == (None, None, 0)
    assert d["session_id"] == 0 and d["error_code"] == 0
    frame = protocol.encode_request(3, 4, 1, None, {})
    h, off = protocol.read_request_header(frame[4:])
    assert h.client_id is None
    absent = {"include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
    assert protocol.decode_request(3, 4, frame[4:], off) == {"topics": None, "allow_auto_topic_creation": True,
                                                              **absent}
    frame = protocol.encode_request(3, 0, 1, "x", {})
    assert protocol.decode_request(3, 0, frame[4:], 11) == {"topics": [], "allow_auto_topic_creation": True,
                                                             **absent}


def test_decoded_dicts_carry_defaults_of_fields_the_version_lacks():
    body = {"max_wait_ms": 500, "min_bytes": 1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 100}]}]}
    frame = protocol.encode_request(1, 4, 1, "c", body)
    d = protocol.decode_request(1, 4, frame[4:], 11)
    assert (d["session_id"], d["session_epoch"], d["forgotten_topics_data"], d["rack_id"]) == (0, -1, [], "")
    part = d["topics"][0]["partitions"][0]
    assert (part["current_leader_epoch"], part["log_start_offset"]) == (-1, -1)


def test_encode_rejects_typos_and_ignores_fields_of_other_versions():
    with pytest.raises(ValueError, match="responsess"):
        protocol.encode_response(1, 11, 1, {"responsess": []})
    with pytest.raises(ValueError, match=r"responses\[0\]\.partitions\[1\].*high_water_mark"):
        protocol.encode_response(1, 11, 1, {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0}, {"partition_index": 1, "high_water_mark": 3}]}]})
    # preferred_read_replica is a v11+ field: v4 ignores it
    a = protocol.encode_response(1, 4, 1, {"responses": [{"topic": "t", "partitions": [{"partition_index": 0}]}]})
    b = protocol.encode_response(1, 4, 1, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "preferred_read_replica": 3}]}]})
    assert a == b


@pytest.mark.parametrize(("body", "match"), [
    ({"throttle_time_ms": "x"}, "throttle_time_ms"),
    ({"throttle_time_ms": 2**31}, "throttle_time_ms"),
    ({"responses": [{"topic": None}]}, r"responses\[0\]\.topic.*None"),
    ({"responses": [{"topic": 5}]}, r"responses\[0\]\.topic.*str"),
    ({"responses": [{"partitions": [{"records": 5}]}]}, "records"),
    ({"responses": [{"partitions": [{"records": [b"a", 5]}]}]}, "records"),
    ({"responses": {"topic": "t"}}, "responses.*list"),
    ({"responses": ["t"]}, r"responses\[0\].*dict"),
])
def test_encode_bad_values_raise_value_error_naming_the_field(body, match):
    with pytest.raises(ValueError, match=match):
        protocol.encode_response(1, 11, 1, body)


def test_records_buffers_are_chunks_not_copies():
    a, b, c = b"A" * 1000, memoryview(bytearray(b"B" * 500)), bytearray(b"C" * 10)
    chunks = protocol.encode_response(1, 11, 3, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": [a, b]}, {"partition_index": 1, "records": c},
        {"partition_index": 2, "records": b""}, {"partition_index": 3, "records": None}]}]})
    assert chunks[1] is a and chunks[2] is b and chunks[4] is c
    total = sum(memoryview(x).nbytes for x in chunks)
    assert struct.unpack_from(">i", chunks[0])[0] == total - 4
    corr, d = protocol.decode_response(1, 11, b"".join(chunks)[4:])
    recs = [plain(p["records"]) for p in d["responses"][0]["partitions"]]
    assert corr == 3 and recs == [a + bytes(b), bytes(c), b"", None]


def test_decoded_records_are_zero_copy_views_of_the_frame():
    frame = bytearray(protocol.encode_request(0, 7, 1, "c", {"acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"R" * 64}]}]})[4:])
    d = protocol.decode_request(0, 7, frame, protocol.read_request_header(frame)[1])
    records = d["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview) and records.obj is frame
    frame[-1:] = b"X"
    assert records.tobytes() == b"R" * 63 + b"X"


# ---------------------------------------------------------------------------------------------------------------------
# consumer protocol

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_equals_kio(version):
    from kio.schema.consumer_protocol_subscription import v0, v1, v2, v3
    cls = [v0, v1, v2, v3][version].data.ConsumerProtocolSubscription
    data = protocol.encode_subscription(["tøpic", "b"], b"\x01ud", version, owned_partitions={"tøpic": [1, 4]},
                                        generation_id=7, rack_id="rack-ä")
    assert struct.unpack_from(">h", data)[0] == version
    parsed, size = entity_reader(cls)(data, 2)
    assert 2 + size == len(data)
    out = io.BytesIO()
    entity_writer(cls)(out, parsed)
    assert struct.pack(">h", version) + out.getvalue() == data
    d = protocol.decode_subscription(data)
    assert d["version"] == version and d["topics"] == ["tøpic", "b"] and d["user_data"] == b"\x01ud"
    assert isinstance(d["user_data"], bytes)
    expected = from_kio(parsed)
    assert {k: d[k] for k in expected} == expected
    assert d["generation_id"] == (7 if version >= 2 else -1)
    assert d["owned_partitions"] == ([{"topic": "tøpic", "partitions": [1, 4]}] if version >= 1 else [])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_equals_kio(version):
    from kio.schema.consumer_protocol_assignment import v0, v1, v2, v3
    cls = [v0, v1, v2, v3][version].data.ConsumerProtocolAssignment
    data = protocol.encode_assignment({"a": [0, 2], "ü": []}, None, version)
    parsed, size = entity_reader(cls)(data, 2)
    assert 2 + size == len(data)
    assert [(tp.topic, list(tp.partitions)) for tp in parsed.assigned_partitions] == [("a", [0, 2]), ("ü", [])]
    assert parsed.user_data is None
    assert protocol.decode_assignment(data) == {"version": version, "assigned_partitions": {"a": [0, 2], "ü": []},
                                                "user_data": None}


def test_consumer_protocol_from_real_clients():
    from aiokafka.protocol.group import MemberAssignment, ProtocolMetadata
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    sub = ConsumerProtocolSubscription(version=1, topics=["t1", "t2"], user_data=b"", owned_partitions=[])
    d = protocol.decode_subscription(sub.encode())
    assert (d["version"], d["topics"], d["user_data"], d["owned_partitions"]) == (1, ["t1", "t2"], b"", [])
    d = protocol.decode_subscription(ProtocolMetadata(0, ["x"], b"ud").encode())
    assert (d["version"], d["topics"], d["user_data"]) == (0, ["x"], b"ud")

    raw = protocol.encode_assignment({"t1": [3, 1]}, b"u")
    assignment = ConsumerProtocolAssignment.decode(raw)
    assert [(tp.topic, list(tp.partitions)) for tp in assignment.assigned_partitions] == [("t1", [3, 1])]
    assert MemberAssignment.decode(raw).assignment == [("t1", [3, 1])]


def test_consumer_protocol_newer_versions_read_as_v3_and_garbage_rejected():
    data = protocol.encode_subscription(["t"], None, 3, rack_id="r")
    newer = struct.pack(">h", 9) + data[2:] + b"future-fields"
    assert protocol.decode_subscription(newer)["rack_id"] == "r"
    for bad in (b"", b"\x00", b"\xff\xff", b"\x00\x00\x00\x00\x00\x05\x00\x01a", b"\x00\x00\xff\xff\xff\xfe"):
        with pytest.raises(InvalidRequestError):
            protocol.decode_subscription(bad)
        with pytest.raises(InvalidRequestError):
            protocol.decode_assignment(bad)


# ---------------------------------------------------------------------------------------------------------------------
# bad input

def _real_requests():
    return [
        protocol.encode_request(0, 7, 1, "producer-1", {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                                "topic_data": [{"name": "tøpic", "partition_data": [
                                    {"index": 0, "records": b"\x00" * 70}, {"index": 1, "records": None}]}]}),
        protocol.encode_request(1, 11, 2, "consumer", sample(_table(1)["request"], 11, False)),
        protocol.encode_request(3, 4, 3, None, {"topics": [{"name": "a"}, {"name": "b"}]}),
        protocol.encode_request(11, 5, 4, "c", sample(_table(11)["request"], 5, True)),
        protocol.encode_request(18, 3, 5, "rdkafka", {"client_software_name": "x", "client_software_version": "2"}),
        protocol.encode_request(49, 0, 6, "c", sample(_table(49)["request"], 0, False)),
    ]


@pytest.mark.parametrize("index", range(6))
def test_truncated_at_every_byte_raises_invalid_request(index):
    frame = _real_requests()[index][4:]
    header, offset = protocol.read_request_header(frame)
    assert protocol.decode_request(header.api_key, header.api_version, frame, offset)
    for cut in range(len(frame)):
        with pytest.raises(InvalidRequestError) as info:
            h, off = protocol.read_request_header(frame[:cut])
            protocol.decode_request(h.api_key, h.api_version, frame[:cut], off)
        if cut >= offset:
            assert f"{protocol.API_NAMES[header.api_key]} v{header.api_version} request" in str(info.value)
    if protocol.is_flexible(header.api_key, header.api_version):  # ignored after the tagged fields, as Kafka
        assert protocol.decode_request(header.api_key, header.api_version, frame + b"\x00\x00", offset) == \
            protocol.decode_request(header.api_key, header.api_version, frame, offset)
    else:
        with pytest.raises(InvalidRequestError, match="2 trailing bytes"):
            protocol.decode_request(header.api_key, header.api_version, frame + b"\x00\x00", offset)


def _produce_frame(records_len=None, records=b"R" * 10, name_len=None, count=None):
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1 if count is None else count)
    name = b"t"
    body += struct.pack(">h", len(name) if name_len is None else name_len) + name
    body += struct.pack(">ii", 1, 0)
    body += struct.pack(">i", len(records) if records_len is None else records_len) + records
    return struct.pack(">hhih", 0, 7, 1, -1) + body


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, None),
    ({"records_len": 11}, r"topic_data\[0\]\.partition_data\[0\]\.records: records length 11 past the end"),
    ({"records_len": 2**31 - 1}, "records length .* past the end"),
    ({"records_len": -2}, "negative records length -2"),
    ({"records_len": -1, "records": b""}, None),
    ({"name_len": -1}, r"topic_data\[0\]\.name: null string in a non-nullable|negative string length -1"),
    ({"name_len": -7}, "negative string length -7"),
    ({"name_len": 900}, "string length 900 past the end"),
    ({"count": -1}, "topic_data: negative array length -1"),
    ({"count": 2}, r"topic_data\[1\]"),
    ({"count": 10**9}, "topic_data: array length .* past the end"),
])
def test_bad_lengths(kwargs, match):
    frame = _produce_frame(**kwargs)
    if match is None:
        d = protocol.decode_request(0, 7, frame, 10)
        records = d["topic_data"][0]["partition_data"][0]["records"]
        assert records is None if kwargs else records.tobytes() == b"R" * 10
    else:
        with pytest.raises(InvalidRequestError, match=r"Produce v7 request: field .*" + match):
            protocol.decode_request(0, 7, frame, 10)


def test_bad_header_and_utf8():
    with pytest.raises(InvalidRequestError, match="header"):
        protocol.read_request_header(b"\x00\x00\x00\x07\x00\x00\x00\x01\x00")
    with pytest.raises(InvalidRequestError, match="negative client id length"):
        protocol.read_request_header(b"\x00\x00\x00\x07\x00\x00\x00\x01\xff\xfe")
    with pytest.raises(InvalidRequestError, match="client id of 5 bytes past the end"):
        protocol.read_request_header(b"\x00\x00\x00\x07\x00\x00\x00\x01\x00\x05abc")
    header, _ = protocol.read_request_header(b"\x00\x00\x00\x07\x00\x00\x00\x01\x00\x02\xff\xfe")
    assert header.client_id == "\ufffd" * 2
    frame = struct.pack(">hhih", 17, 1, 1, -1) + b"\x00\x02\xc3\x28"
    with pytest.raises(InvalidRequestError, match="mechanism: invalid UTF-8"):
        protocol.decode_request(17, 1, frame, 10)
    with pytest.raises(InvalidRequestError, match="offset"):
        protocol.decode_request(17, 1, frame, 99)


def test_flexible_bad_varints():
    base = b"\x00\x12\x00\x03\x00\x00\x00\x09\x00\x01c\x00"
    for body, match in [(b"\x80\x80\x80\x80\x80\x01", "varint longer than 5 bytes"),
                        (b"\x80", "truncated varint"), (b"\x00\x021\x00", "null string in a non-nullable"),
                        (b"\x09kl", "string length 8 past the end"), (b"\x01\x01", "truncated varint"),
                        (b"\x01\x01\x10", "tagged field count 16 past the end"),
                        (b"\x01\x01\x01\x00\x05ab", "tagged field of 5 bytes past the end")]:
        with pytest.raises(InvalidRequestError, match=match):
            protocol.decode_request(18, 3, base + body, len(base))
    # bytes after a flexible request's tagged fields are ignored, as Kafka's parser ignores them (librdkafka 2.16
    # sends such Metadata requests); a non-flexible request with trailing bytes is still refused
    assert protocol.decode_request(18, 3, base + b"\x01\x01\x00\x00", len(base)) == {
        "client_software_name": "", "client_software_version": "", "cluster_id": None, "node_id": -1}
    all_topics = protocol.encode_request(3, 12, 1, "rdkafka", {"topics": None, "allow_auto_topic_creation": False})
    h, off = protocol.read_request_header(all_topics[4:])
    assert protocol.decode_request(3, 12, all_topics[4:] + b"\x01\x00\x00", off)["topics"] is None
    v4 = protocol.encode_request(3, 4, 1, "x", {"topics": None})
    with pytest.raises(InvalidRequestError, match="1 trailing bytes"):
        protocol.decode_request(3, 4, v4[4:] + b"\x00", protocol.read_request_header(v4[4:])[1])
    with pytest.raises(InvalidRequestError, match="header: tagged fields"):
        protocol.read_request_header(base[:-1] + b"\x01\x00\x09")


_FUZZ_CASES = st.sampled_from(CASES)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_FUZZ_CASES, data=st.binary(max_size=200))
def test_fuzz_random_bytes(case, data):
    key, version = case
    try:
        protocol.decode_request(key, version, data, 0)
    except (InvalidRequestError, UnsupportedVersionError):
        pass
    try:
        h, off = protocol.read_request_header(data)
        protocol.decode_request(h.api_key, h.api_version, data, off)
    except (InvalidRequestError, UnsupportedVersionError):
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, 5), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
       cut=st.integers(0, 10**6))
def test_fuzz_mutated_real_requests(index, edits, cut):
    frame = bytearray(_real_requests()[index][4:])
    for pos, value in edits:
        frame[pos % len(frame)] = value
    frame = bytes(frame[: max(len(frame) - cut % 8, 0)])
    try:
        h, off = protocol.read_request_header(frame)
        protocol.decode_request(h.api_key, h.api_version, frame, off)
    except (InvalidRequestError, UnsupportedVersionError):
        pass
