"""Kafka wire protocol codec, driven by the message tables in ``schemas.py`` (pure Python, every API kafkalog speaks).

Framing and headers, in Kafka notation (all integers big-endian)::

    Frame            => Size(INT32) Message                        Size counts the bytes after itself
    RequestHeader v1 => request_api_key(INT16) request_api_version(INT16) correlation_id(INT32)
                        client_id(NULLABLE_STRING)
    RequestHeader v2 => RequestHeader v1 TAG_BUFFER                 for flexible (key, version)
    ResponseHeader v0 => correlation_id(INT32)
    ResponseHeader v1 => correlation_id(INT32) TAG_BUFFER           flexible versions, except ApiVersions (always v0)

Field types: INT8/INT16/INT32/INT64/UINT16/FLOAT64 fixed width; BOOLEAN one byte (non-zero = true); UUID 16 bytes;
STRING INT16 length + UTF-8 (-1 = null); BYTES / RECORDS INT32 length + bytes (-1 = null); ARRAY INT32 count +
elements (-1 = null). Flexible versions (KIP-482) use COMPACT_STRING / COMPACT_BYTES / COMPACT_RECORDS /
COMPACT_ARRAY (UNSIGNED_VARINT length + 1, 0 = null) and end every struct with a TAG_BUFFER::

    TAG_BUFFER => count(UNSIGNED_VARINT) [tag(UNSIGNED_VARINT) size(UNSIGNED_VARINT) data(size bytes)]

Tagged fields are skipped on decode and never written (every TAG_BUFFER we write is the single byte 0): librdkafka
before 2.2.0 (Debian's kcat) misreads tagged fields it does not know.

Each (api key, version, direction) is compiled once at import into a reader and a writer. Decoded messages are dicts
with the JSON field names in snake_case, holding every field of the table (fields the version lacks get their
default, as Kafka's generated classes do); bytes and records fields are memoryview slices of the request (zero copy).
Consumer protocol (``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``, the opaque JoinGroup metadata
and SyncGroup assignment bytes) is ``Version(INT16)`` followed by that version's struct.

The codec is stateless and thread-safe.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from kafkalog.errors import InvalidRequestError, UnsupportedVersionError

from . import schemas

__all__ = [
    "API_NAMES", "SUPPORTED", "RequestHeader", "decode_assignment", "decode_request", "decode_response",
    "decode_subscription", "encode_assignment", "encode_request", "encode_response", "encode_subscription",
    "is_flexible", "read_request_header",
]

API_NAMES: dict[int, str] = {key: api["name"] for key, api in schemas.APIS.items()}
SUPPORTED: dict[int, tuple[int, int]] = {key: tuple(api["versions"]) for key, api in schemas.APIS.items()}
_FLEXIBLE: dict[int, int | None] = {key: api["flexible"] for key, api in schemas.APIS.items()}
_API_VERSIONS_KEY = 18

_FIXED = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "float64": "d", "bool": "?"}
_ZERO = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0, "bool": False,
         "string": "", "bytes": b"", "records": None, "uuid": uuid.UUID(int=0)}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">hhih")
_NULL16 = b"\xff\xff"
_NULL32 = b"\xff\xff\xff\xff"
_VARINT1 = [bytes((n,)) for n in range(128)]


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (key, version) uses KIP-482 compact types and tagged fields (request header v2)."""
    first = _FLEXIBLE.get(api_key)
    return first is not None and api_version >= first


# ---------------------------------------------------------------------------------------------------------------------
# errors: _Bad travels up through the nested readers collecting the field path, the entry points turn it into
# InvalidRequestError (decode) or ValueError (encode) naming API, version and field.

class _Bad(Exception):
    def __init__(self, what: str, name: str | None = None):
        super().__init__(what)
        self.what = what
        self.path = [] if name is None else [name]

    def where(self) -> str:
        out = ""
        for piece in reversed(self.path):
            out += piece if piece.startswith("[") or not out else "." + piece
        return out

    def describe(self, what: str) -> str:
        where = self.where()
        return f"{what}: field {where}: {self.what}" if where else f"{what}: {self.what}"


def _invalid(what: str, bad: _Bad) -> InvalidRequestError:
    return InvalidRequestError(bad.describe(what))


# ---------------------------------------------------------------------------------------------------------------------
# versions ("3+", "0-12", "5", "none") and table rows

def _in(spec: str | None, version: int) -> bool:
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


def _row(row):
    name, typ, versions, opts = row[:4]
    return name, typ, versions, opts, (row[4] if len(row) > 4 else None)


# ---------------------------------------------------------------------------------------------------------------------
# readers: read(buf, pos) -> (value, new_pos); buf is a 1-D byte memoryview of the whole frame

def _read_uvarint(buf, pos):
    value = shift = 0
    end = len(buf)
    for _ in range(5):
        if pos >= end:
            raise _Bad("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise _Bad("varint longer than 5 bytes")


def _skip_tags(buf, pos):
    count, pos = _read_uvarint(buf, pos)
    if count > len(buf) - pos:
        raise _Bad(f"tagged field count {count} past the end", "_tagged_fields")
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise _Bad(f"tagged field of {size} bytes past the end", "_tagged_fields")
    return pos


def _length_reader(flexible: bool, wide: bool, nullable: bool, what: str):
    """Reads a length prefix: returns (n, pos), n = -1 for null; rejects negative non-null lengths."""
    if flexible:
        def read_len(buf, pos):
            n, pos = _read_uvarint(buf, pos)
            if n == 0:
                if nullable:
                    return -1, pos
                raise _Bad(f"null {what} in a non-nullable field")
            n -= 1
            if n > len(buf) - pos:
                raise _Bad(f"{what} length {n} past the end ({len(buf) - pos} bytes left)")
            return n, pos
    else:
        unpack = (_I32 if wide else _I16).unpack_from
        step = 4 if wide else 2

        def read_len(buf, pos):
            n = unpack(buf, pos)[0]
            pos += step
            if n < 0:
                if n == -1 and nullable:
                    return -1, pos
                raise _Bad(f"negative {what} length {n}")
            if n > len(buf) - pos:
                raise _Bad(f"{what} length {n} past the end ({len(buf) - pos} bytes left)")
            return n, pos
    return read_len


def _string_reader(flexible, nullable):
    read_len = _length_reader(flexible, False, nullable, "string")

    def read_string(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            return None, pos
        end = pos + n
        return str(buf[pos:end], "utf-8"), end
    return read_string


def _bytes_reader(flexible, nullable, what):
    read_len = _length_reader(flexible, True, nullable, what)

    def read_bytes(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            return None, pos
        end = pos + n
        return buf[pos:end], end
    return read_bytes


def _read_uuid(buf, pos):
    end = pos + 16
    if end > len(buf):
        raise _Bad("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def _scalar_reader(typ, flexible, nullable):
    if typ in _FIXED:
        st = struct.Struct(">" + _FIXED[typ])
        unpack, size = st.unpack_from, st.size

        def read_fixed(buf, pos):
            return unpack(buf, pos)[0], pos + size
        return read_fixed
    if typ == "string":
        return _string_reader(flexible, nullable)
    if typ in ("bytes", "records"):
        return _bytes_reader(flexible, nullable, typ)
    if typ == "uuid":
        return _read_uuid
    raise TypeError(f"unknown Kafka type {typ!r}")


def _array_reader(elem_typ, elem_reader, flexible, nullable):
    read_len = _length_reader(flexible, True, nullable, "array")
    fixed = _FIXED.get(elem_typ)
    if fixed is not None:
        size = struct.calcsize(">" + fixed)

        def read_fixed_array(buf, pos):
            n, pos = read_len(buf, pos)
            if n < 0:
                return None, pos
            end = pos + n * size
            if end > len(buf):
                raise _Bad(f"array of {n} {elem_typ} past the end")
            return list(struct.unpack_from(f">{n}{fixed}", buf, pos)), end
        return read_fixed_array

    def read_array(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            return None, pos
        out = []
        append = out.append
        for i in range(n):
            try:
                value, pos = elem_reader(buf, pos)
            except _Bad as bad:
                bad.path.append(f"[{i}]")
                raise
            except (struct.error, UnicodeDecodeError) as exc:
                raise _bad_from(exc, f"[{i}]") from None
            append(value)
        return out, pos
    return read_array


def _bad_from(exc: Exception, name: str) -> _Bad:
    if isinstance(exc, UnicodeDecodeError):
        return _Bad(f"invalid UTF-8 ({exc.reason})", name)
    return _Bad("truncated", name)


# ---------------------------------------------------------------------------------------------------------------------
# writers: write(buf, chunks, value) appends to the bytearray buf; a records field moves buf's bytes into chunks,
# then its buffers, and writing goes on in the emptied buf

class _BadValue(_Bad):
    pass


def _uvarint(n: int) -> bytes:
    if n < 128:
        return _VARINT1[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_writer(flexible: bool, wide: bool):
    if flexible:
        def write_len(buf, n):
            buf += _uvarint(n + 1)
    else:
        pack = (_I32 if wide else _I16).pack

        def write_len(buf, n):
            buf += pack(n)
    return write_len


def _null_writer(flexible, wide, nullable, what):
    null = b"\x00" if flexible else (_NULL32 if wide else _NULL16)

    def write_null(buf):
        if not nullable:
            raise _BadValue(f"None given for a non-nullable {what}")
        buf += null
    return write_null


def _string_writer(flexible, nullable):
    write_len = _length_writer(flexible, False)
    write_null = _null_writer(flexible, False, nullable, "string")

    def write_string(buf, chunks, value):
        if value is None:
            write_null(buf)
            return
        if value.__class__ is not str:
            raise _BadValue(f"expected str, got {type(value).__name__}")
        data = value.encode()
        if len(data) > 32767:
            raise _BadValue(f"string of {len(data)} bytes is longer than 32767")
        write_len(buf, len(data))
        buf += data
    return write_string


def _nbytes(value) -> int:
    return value.nbytes if value.__class__ is memoryview else len(value)


def _bytes_writer(flexible, nullable):
    write_len = _length_writer(flexible, True)
    write_null = _null_writer(flexible, True, nullable, "bytes")

    def write_bytes(buf, chunks, value):
        if value is None:
            write_null(buf)
            return
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _BadValue(f"expected bytes, got {type(value).__name__}")
        write_len(buf, _nbytes(value))
        buf += value
    return write_bytes


def _records_writer(flexible, nullable):
    write_len = _length_writer(flexible, True)
    write_null = _null_writer(flexible, True, nullable, "records")

    def write_records(buf, chunks, value):
        if value is None:
            write_null(buf)
            return
        if value.__class__ is list or value.__class__ is tuple:
            parts = value
        elif isinstance(value, (bytes, bytearray, memoryview)):
            parts = (value,)
        else:
            raise _BadValue(f"expected None, bytes, memoryview or a list of buffers, got {type(value).__name__}")
        try:
            total = sum([_nbytes(p) for p in parts])
        except TypeError:
            raise _BadValue("records list holds something that is not a buffer") from None
        write_len(buf, total)
        if total:
            # hand the caller's buffers over as they are: the frame is written with writelines, nothing is copied
            chunks.append(bytes(buf))
            del buf[:]
            chunks.extend([p for p in parts if _nbytes(p)])
    return write_records


def _write_uuid(buf, chunks, value):
    if not isinstance(value, uuid.UUID):
        raise _BadValue(f"expected uuid.UUID, got {type(value).__name__}")
    buf += value.bytes


def _scalar_writer(typ, flexible, nullable):
    if typ in _FIXED:
        pack = struct.Struct(">" + _FIXED[typ]).pack

        def write_fixed(buf, chunks, value):
            buf += pack(value)
        return write_fixed
    if typ == "string":
        return _string_writer(flexible, nullable)
    if typ == "bytes":
        return _bytes_writer(flexible, nullable)
    if typ == "records":
        return _records_writer(flexible, nullable)
    if typ == "uuid":
        return _write_uuid
    raise TypeError(f"unknown Kafka type {typ!r}")


def _array_writer(elem_typ, elem_writer, flexible, nullable):
    write_len = _length_writer(flexible, True)
    write_null = _null_writer(flexible, True, nullable, "array")
    fixed = _FIXED.get(elem_typ)

    def write_array(buf, chunks, value):
        if value is None:
            write_null(buf)
            return
        if value.__class__ is not list and value.__class__ is not tuple:
            raise _BadValue(f"expected a list, got {type(value).__name__}")
        write_len(buf, len(value))
        if fixed is not None:
            buf += struct.pack(f">{len(value)}{fixed}", *value)
            return
        for i, item in enumerate(value):
            try:
                elem_writer(buf, chunks, item)
            except _Bad as bad:
                bad.path.append(f"[{i}]")
                raise
            except (struct.error, TypeError, AttributeError, OverflowError) as exc:
                raise _BadValue(str(exc), f"[{i}]") from None
    return write_array


# ---------------------------------------------------------------------------------------------------------------------
# structs

class _Struct:
    """One struct of one message version: its reader, its writer and the defaults of the fields it lacks."""

    __slots__ = ("name", "flexible", "read", "write", "keys", "absent", "absent_lists", "tags", "read_tags")

    def __init__(self, name, rows, version, flexible, read_tags=False):
        self.name = name
        self.flexible = flexible
        self.keys = frozenset(_row(r)[0] for r in rows)
        self.absent = {}
        self.absent_lists = []
        # the tagged fields of this version (KIP-482): tag -> (name, default, reader, writer); written only when
        # their value is not the default, as Kafka's generated code does; in responses (``read_tags``) read into the
        # dict when present (a request's tagged fields are a follower's, which a single node skips)
        self.tags = {}
        self.read_tags = read_tags
        read_steps, write_steps = [], []
        run = []  # consecutive fixed-width fields: one struct.Struct for all of them

        def close_run():
            if run:
                st = struct.Struct(">" + "".join(_FIXED[t] for _, t, _ in run))
                read_steps.append((0, tuple(n for n, _, _ in run), st))
                write_steps.append((0, tuple((n, d, _FIXED[t]) for n, t, d in run), st))
                run.clear()

        for r in rows:
            name, typ, versions, opts, sub = _row(r)
            tagged = "tag" in opts and _in(opts.get("tagged"), version)
            if not _in(versions, version) or tagged:
                default = _absent_default(typ, opts, sub)
                if default == [] and default.__class__ is list:
                    self.absent_lists.append(name)
                else:
                    self.absent[name] = default
                if tagged and _in(versions, version) and flexible:
                    nullable = _in(opts.get("nullable"), version)
                    reader, writer = _field_codec(name, typ, sub, version, flexible, nullable, read_tags)
                    self.tags[opts["tag"]] = (name, default, reader, writer)
                continue
            nullable = _in(opts.get("nullable"), version)
            default = _present_default(typ, opts, nullable, sub)
            if typ in _FIXED:
                run.append((name, typ, default))
                continue
            close_run()
            reader, writer = _field_codec(name, typ, sub, version, flexible, nullable, read_tags)
            read_steps.append((1, name, reader))
            write_steps.append((1, name, (default, writer)))
        close_run()
        self.read = self._make_reader(tuple(read_steps))
        self.write = self._make_writer(tuple(write_steps))

    def _make_reader(self, steps):
        flexible, absent, absent_lists = self.flexible, self.absent, self.absent_lists
        tags = self.tags if self.read_tags else None

        def read_struct(buf, pos):
            out = {}
            for kind, name, reader in steps:
                if kind == 0:
                    try:
                        values = reader.unpack_from(buf, pos)
                    except struct.error:
                        raise _Bad("truncated", _cut_field(name, reader, len(buf) - pos)) from None
                    pos += reader.size
                    out.update(zip(name, values))
                    continue
                try:
                    out[name], pos = reader(buf, pos)
                except _Bad as bad:
                    bad.path.append(name)
                    raise
                except (struct.error, UnicodeDecodeError) as exc:
                    raise _bad_from(exc, name) from None
            found = None
            if tags:
                found, pos = _read_tags(buf, pos, tags)
            elif flexible:
                pos = _skip_tags(buf, pos)
            if absent:
                out.update(absent)
            for name in absent_lists:
                out[name] = []
            if found:
                out.update(found)
            return out, pos
        return read_struct

    def _make_writer(self, steps):
        flexible, keys, struct_name = self.flexible, self.keys, self.name
        tags = sorted(self.tags.items())

        def write_struct(buf, chunks, value):
            if value.__class__ is not dict:
                raise _BadValue(f"expected a dict for {struct_name}, got {type(value).__name__}")
            if not keys.issuperset(value):
                unknown = sorted(map(str, set(value) - keys))
                raise _BadValue(f"unknown field(s) {', '.join(unknown)} (fields: {', '.join(sorted(keys))})")
            get = value.get
            for kind, name, codec in steps:
                if kind == 0:
                    try:
                        buf += codec.pack(*[get(n, d) for n, d, _ in name])
                    except struct.error as exc:
                        raise _BadValue(str(exc), _bad_fixed_field(name, value)) from None
                    continue
                default, writer = codec
                try:
                    writer(buf, chunks, get(name, default))
                except _Bad as bad:
                    bad.path.append(name)
                    raise
                except (struct.error, TypeError, AttributeError, OverflowError) as exc:
                    raise _BadValue(str(exc), name) from None
            if tags:
                _write_tags(buf, tags, get)
            elif flexible:
                buf.append(0)  # empty TAG_BUFFER
        return write_struct


def _read_tags(buf, pos, tags):
    """A TAG_BUFFER: the known tags decoded ({name: value}), unknown ones skipped."""
    count, pos = _read_uvarint(buf, pos)
    if count > len(buf) - pos:
        raise _Bad(f"tagged field count {count} past the end", "_tagged_fields")
    found = {}
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise _Bad(f"tagged field of {size} bytes past the end", "_tagged_fields")
        known = tags.get(tag)
        if known is not None:
            name, _default, reader, _writer = known
            try:
                found[name], got = reader(buf[:end], pos)
            except _Bad as bad:
                bad.path.append(name)
                raise
            except (struct.error, UnicodeDecodeError) as exc:
                raise _bad_from(exc, name) from None
            if got != end:
                raise _Bad(f"tagged field {tag} is {size} bytes, its value {got - pos}", name)
        pos = end
    return found, pos


def _write_tags(buf, tags, get):
    """A TAG_BUFFER with every tagged field whose value is not its default, by ascending tag."""
    out = []
    for tag, (name, default, _reader, writer) in tags:
        value = get(name, default)
        if value is None or value == default:
            continue
        data = bytearray()
        try:
            writer(data, [], value)
        except _Bad as bad:
            bad.path.append(name)
            raise
        except (struct.error, TypeError, AttributeError, OverflowError) as exc:
            raise _BadValue(str(exc), name) from None
        out.append((tag, data))
    buf += _uvarint(len(out))
    for tag, data in out:
        buf += _uvarint(tag)
        buf += _uvarint(len(data))
        buf += data


def _cut_field(names, st, left):
    """Name of the fixed-width field cut off by the end of the frame (error path only)."""
    pos = 0
    for name, code in zip(names, st.format[1:]):
        pos += struct.calcsize(">" + code)
        if pos > left:
            return name
    return names[-1]


def _bad_fixed_field(run, value):
    """Name of the fixed-width field whose value does not pack (error path only)."""
    for name, default, code in run:
        try:
            struct.pack(">" + code, value.get(name, default))
        except struct.error:
            return name
    return run[0][0]


def _present_default(typ, opts, nullable, sub):
    if "default" in opts:
        return opts["default"]
    if nullable:
        return None
    if typ.startswith("[]"):
        return []
    if sub is not None:
        return {}
    return _ZERO[typ]


def _absent_default(typ, opts, sub):
    if "default" in opts:
        return opts["default"]
    if typ.startswith("[]"):
        return []
    if sub is not None:
        return None
    return _ZERO[typ]


def _nullable_struct(s: _Struct):
    """A nullable struct field: an int8 marker (-1 null, 1 present) before the struct (Kafka's generated code)."""
    def read(buf, pos):
        if pos >= len(buf):
            raise _Bad("truncated struct marker")
        marker = buf[pos]
        if marker == 0xFF:
            return None, pos + 1
        if marker != 1:
            raise _Bad(f"struct marker {marker} (expected -1 or 1)")
        return s.read(buf, pos + 1)

    def write(buf, chunks, value):
        if value is None:
            buf.append(0xFF)
            return
        buf.append(1)
        s.write(buf, chunks, value)
    return read, write


def _field_codec(name, typ, sub, version, flexible, nullable, read_tags=False):
    if typ.startswith("[]"):
        elem = typ[2:]
        if sub is not None:
            s = _Struct(elem, sub, version, flexible, read_tags)
            return (_array_reader(elem, s.read, flexible, nullable),
                    _array_writer(elem, s.write, flexible, nullable))
        return (_array_reader(elem, _scalar_reader(elem, flexible, False), flexible, nullable),
                _array_writer(elem, _scalar_writer(elem, flexible, False), flexible, nullable))
    if sub is not None:  # a nested struct (not an array)
        s = _Struct(typ, sub, version, flexible, read_tags)
        if nullable:
            return _nullable_struct(s)
        return s.read, s.write
    return _scalar_reader(typ, flexible, nullable), _scalar_writer(typ, flexible, nullable)


def _compile(key: int, version: int, response: bool) -> _Struct:
    api = schemas.APIS[key]
    kind = "Response" if response else "Request"
    return _Struct(api["name"] + kind, api["response" if response else "request"], version, is_flexible(key, version),
                   read_tags=response)


# (key, version, response) -> its codec, compiled on first use (compiling every table costs ~50 ms at start-up)
_MESSAGES: dict[tuple[int, int, bool], _Struct] = {}
_SUBSCRIPTION = {v: _Struct("ConsumerProtocolSubscription", schemas.CONSUMER_PROTOCOL_SUBSCRIPTION, v, False)
                 for v in range(4)}
_ASSIGNMENT = {v: _Struct("ConsumerProtocolAssignment", schemas.CONSUMER_PROTOCOL_ASSIGNMENT, v, False)
               for v in range(4)}


def _message(api_key: int, api_version: int, response: bool) -> _Struct:
    try:
        return _MESSAGES[api_key, api_version, response]
    except KeyError:
        have = SUPPORTED.get(api_key)
        if have is None or not have[0] <= api_version <= have[1]:
            name = API_NAMES.get(api_key, f"API key {api_key}")
            detail = f"supported {have[0]}-{have[1]}" if have else "unknown API key"
            raise UnsupportedVersionError(f"{name} v{api_version} is not supported ({detail})") from None
    # two threads compiling the same message at once both get a correct codec; the dict keeps one
    return _MESSAGES.setdefault((api_key, api_version, response), _compile(api_key, api_version, response))


def _view(frame) -> memoryview:
    mv = frame if frame.__class__ is memoryview else memoryview(frame)
    if mv.ndim != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B")
    return mv


def _what(api_key, api_version, kind):
    return f"{API_NAMES.get(api_key, f'API key {api_key}')} v{api_version} {kind}"


# ---------------------------------------------------------------------------------------------------------------------
# entry points

def read_request_header(frame) -> tuple[RequestHeader, int]:
    """Parse the request header of one frame (without its size prefix) → (header, offset of the body).

    Header v2 (a TAG_BUFFER after the client id) when (key, version) is supported and flexible, else v1 — also for
    unknown keys and versions, which the caller answers (ApiVersions: v0 body with UNSUPPORTED_VERSION).
    """
    mv = _view(frame)
    if len(mv) < _HEADER_V1.size:
        raise InvalidRequestError(f"request header: {len(mv)} bytes, need at least {_HEADER_V1.size} "
                                  "(api key, api version, correlation id, client id length)")
    api_key, api_version, correlation_id, n = _HEADER_V1.unpack_from(mv, 0)
    pos = _HEADER_V1.size
    if n == -1:
        client_id = None
    elif n < 0:
        raise InvalidRequestError(f"request header: negative client id length {n}")
    elif pos + n > len(mv):
        raise InvalidRequestError(f"request header: client id of {n} bytes past the end ({len(mv) - pos} left)")
    else:
        # Java decodes client ids leniently (replacement characters); an odd client id must not cost the connection
        client_id = str(mv[pos:pos + n], "utf-8", "replace")
        pos += n
    lo_hi = SUPPORTED.get(api_key)
    if lo_hi is not None and lo_hi[0] <= api_version <= lo_hi[1] and is_flexible(api_key, api_version):
        try:
            pos = _skip_tags(mv, pos)
        except _Bad as bad:
            raise InvalidRequestError(f"request header: tagged fields: {bad.what}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def decode_request(api_key: int, api_version: int, frame, offset: int) -> dict:
    """Decode the body of a request starting at ``offset`` of ``frame`` (the frame without its size prefix).

    Truncation, bad lengths or trailing bytes → InvalidRequestError; unknown (key, version) →
    UnsupportedVersionError. Bytes and records fields are memoryview slices of ``frame``.

    Trailing bytes after a flexible version's last tagged-field section are ignored, as Kafka's parser ignores them:
    librdkafka 2.16 ends its all-topics Metadata v9+ request with bytes past the body, and Kafka serves it.
    """
    msg = _message(api_key, api_version, False)
    mv = _view(frame)
    if not 0 <= offset <= len(mv):
        raise InvalidRequestError(f"{_what(api_key, api_version, 'request')}: body offset {offset} outside the frame")
    return _decode(msg, mv, offset, _what(api_key, api_version, "request"), trailing_ok=msg.flexible)


def _decode(msg: _Struct, mv: memoryview, offset: int, what: str, trailing_ok: bool = False) -> dict:
    try:
        body, pos = msg.read(mv, offset)
    except _Bad as bad:
        raise _invalid(what, bad) from None
    except (struct.error, UnicodeDecodeError) as exc:
        raise _invalid(what, _bad_from(exc, "")) from None
    if pos != len(mv) and not trailing_ok:
        raise InvalidRequestError(f"{what}: {len(mv) - pos} trailing bytes after the last field")
    return body


def _encode(msg: _Struct, body: dict, buf: bytearray, what: str) -> list:
    """Write body after the 4-byte size slot and header already in buf → chunks, the size prefix filled in."""
    chunks: list = []
    try:
        msg.write(buf, chunks, body)
    except _Bad as bad:
        raise ValueError(bad.describe(what)) from None
    if not chunks:  # no records field was cut out: one buffer
        _I32.pack_into(buf, 0, len(buf) - 4)
        return [bytes(buf)]
    size = sum([_nbytes(c) for c in chunks]) + len(buf) - 4
    if size > 0x7FFFFFFF:
        raise ValueError(f"{what}: {size} bytes do not fit a frame")
    head = bytearray(chunks[0])
    _I32.pack_into(head, 0, size)
    chunks[0] = bytes(head)
    if buf:
        chunks.append(bytes(buf))
    return chunks


def encode_response(api_key: int, api_version: int, correlation_id: int, body: dict) -> list:
    """Encode a response → buffers for ``transport.writelines``: size prefix + response header + body.

    Missing fields take the schema default; a key that is no field of this message in any version → ValueError.
    Records fields (None, a buffer or a list of buffers) become separate chunks, not copied.
    """
    msg = _message(api_key, api_version, True)
    buf = bytearray(8)
    _I32.pack_into(buf, 4, correlation_id)
    if msg.flexible and api_key != _API_VERSIONS_KEY:
        buf.append(0)  # response header v1: empty TAG_BUFFER
    return _encode(msg, body, buf, _what(api_key, api_version, "response"))


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: dict) -> bytes:
    """Encode a request (size prefix + header v1, or v2 for flexible versions, + body) as one bytes object."""
    msg = _message(api_key, api_version, False)
    buf = bytearray(4)
    buf += struct.pack(">hhi", api_key, api_version, correlation_id)
    _string_writer(False, True)(buf, None, client_id)
    if msg.flexible:
        buf.append(0)
    return b"".join(_encode(msg, body, buf, _what(api_key, api_version, "request")))


def decode_response(api_key: int, api_version: int, frame) -> tuple[int, dict]:
    """Decode one response frame (without its size prefix) → (correlation id, body)."""
    msg = _message(api_key, api_version, True)
    mv = _view(frame)
    what = _what(api_key, api_version, "response")
    if len(mv) < 4:
        raise InvalidRequestError(f"{what}: header truncated ({len(mv)} bytes)")
    correlation_id = _I32.unpack_from(mv, 0)[0]
    pos = 4
    if msg.flexible and api_key != _API_VERSIONS_KEY:
        try:
            pos = _skip_tags(mv, pos)
        except _Bad as bad:
            raise InvalidRequestError(f"{what}: header tagged fields: {bad.what}") from None
    return correlation_id, _decode(msg, mv, pos, what)


# ---------------------------------------------------------------------------------------------------------------------
# consumer protocol: Version(INT16) + ConsumerProtocolSubscription / ConsumerProtocolAssignment of that version

def _decode_consumer(structs: dict, data, what: str) -> tuple[int, dict]:
    mv = _view(data)
    if len(mv) < 2:
        raise InvalidRequestError(f"{what}: {len(mv)} bytes, no version")
    version = _I16.unpack_from(mv, 0)[0]
    if version < 0:
        raise InvalidRequestError(f"{what}: negative version {version}")
    # Kafka's ConsumerProtocol reads newer versions with the newest format it knows and ignores what follows: later
    # versions only ever append fields
    msg = structs[min(version, 3)]
    try:
        body, _ = msg.read(mv, 2)
    except _Bad as bad:
        raise _invalid(f"{what} v{version}", bad) from None
    except (struct.error, UnicodeDecodeError) as exc:
        raise _invalid(f"{what} v{version}", _bad_from(exc, "")) from None
    if body.get("user_data") is not None:
        body["user_data"] = bytes(body["user_data"])
    return version, body


def _encode_consumer(structs: dict, version: int, body: dict, what: str) -> bytes:
    if not 0 <= version <= 3:
        raise ValueError(f"{what}: version {version} is not 0-3")
    buf = bytearray(4)
    buf += _I16.pack(version)
    return b"".join(_encode(structs[version], body, buf, f"{what} v{version}"))[4:]


def decode_subscription(data) -> dict:
    """JoinGroup protocol metadata of the "consumer" protocol type → {"version", "topics", "user_data", ...}."""
    version, body = _decode_consumer(_SUBSCRIPTION, data, "ConsumerProtocolSubscription")
    body["version"] = version
    return body


def encode_subscription(topics, user_data=None, version=0, *, owned_partitions=(), generation_id=-1,
                        rack_id=None) -> bytes:
    """Consumer protocol subscription bytes (``owned_partitions`` as {topic: [partition]} or a list of dicts)."""
    if isinstance(owned_partitions, dict):
        owned_partitions = [{"topic": t, "partitions": list(p)} for t, p in owned_partitions.items()]
    body = {"topics": list(topics), "user_data": user_data, "owned_partitions": list(owned_partitions),
            "generation_id": generation_id, "rack_id": rack_id}
    return _encode_consumer(_SUBSCRIPTION, version, body, "ConsumerProtocolSubscription")


def decode_assignment(data) -> dict:
    """SyncGroup assignment bytes → {"version", "assigned_partitions": {topic: [partition]}, "user_data"}."""
    version, body = _decode_consumer(_ASSIGNMENT, data, "ConsumerProtocolAssignment")
    assigned: dict[str, list[int]] = {}
    for tp in body["assigned_partitions"]:
        assigned.setdefault(tp["topic"], []).extend(tp["partitions"])
    return {"version": version, "assigned_partitions": assigned, "user_data": body["user_data"]}


def encode_assignment(assigned: dict[str, list[int]], user_data=None, version=0) -> bytes:
    """Consumer protocol assignment bytes for one member."""
    body = {"assigned_partitions": [{"topic": t, "partitions": list(p)} for t, p in assigned.items()],
            "user_data": user_data}
    return _encode_consumer(_ASSIGNMENT, version, body, "ConsumerProtocolAssignment")
