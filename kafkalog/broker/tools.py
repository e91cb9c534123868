"""Small admin calls over the wire for the CLI (``kafkalog quotas``): one request, one response, plain sockets and
the broker's own codec. PLAINTEXT listeners only."""

from __future__ import annotations

import socket
import struct

from ..errors import KafkaError, for_code
from . import protocol
from .quotas import FETCH, PRODUCE


def call(bootstrap: str, api_key: int, version: int, body: dict, timeout: float = 10.0) -> dict:
    host, _, port = bootstrap.rpartition(":")
    if not host or not port.isdigit():
        raise KafkaError(f"--bootstrap-server {bootstrap!r}: expected host:port")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(protocol.encode_request(api_key, version, 1, "kafkalog-cli", body))
            head = _read(s, 4)
            (size,) = struct.unpack(">i", head)
            _corr, resp = protocol.decode_response(api_key, version, _read(s, size))
            return resp
    except OSError as e:
        raise KafkaError(f"cannot reach the broker at {bootstrap}: {e.strerror or e}") from None


def _read(s, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise KafkaError("the broker closed the connection (is it a SASL listener?)")
        out += chunk
    return bytes(out)


def describe_quotas(bootstrap: str) -> list[tuple[str | None, str, float]]:
    resp = call(bootstrap, 48, 0, {"components": [], "strict": False})
    if resp["error_code"]:
        raise for_code(resp["error_code"])(resp["error_message"] or "DescribeClientQuotas failed")
    return [(e["entity"][0]["entity_name"], v["key"], v["value"]) for e in resp["entries"] or [] for v in e["values"]]


def alter_quota(bootstrap: str, client_id: str | None, key: str, rate: float | None) -> None:
    if key not in (PRODUCE, FETCH):
        raise ValueError(f"quota key must be {PRODUCE} or {FETCH}")
    resp = call(bootstrap, 49, 0, {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": client_id}],
        "ops": [{"key": key, "value": float(rate or 0.0), "remove": rate is None}]}], "validate_only": False})
    e = resp["entries"][0]
    if e["error_code"]:
        raise for_code(e["error_code"])(e["error_message"] or "AlterClientQuotas failed")
