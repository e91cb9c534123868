"""A raw Kafka-protocol client for broker tests: frames built with kafkalog's codec, sent over a plain socket, so a
test can send exactly the bytes it means (garbage included) and see exactly what comes back."""

from __future__ import annotations

import socket
import struct

from kafkalog._engine.batch import build_batch
from kafkalog.broker import protocol


class Wire:
    def __init__(self, port: int, timeout: float = 10.0, client_id: str = "wire-test"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client_id = client_id
        self.corr = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, key: int, version: int, body: dict) -> int:
        self.corr += 1
        self.sock.sendall(protocol.encode_request(key, version, self.corr, self.client_id, body))
        return self.corr

    def recv_frame(self) -> bytes | None:
        """The next response frame (without its size), or None when the broker closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, n: int) -> bytes | None:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return bytes(out)

    def call(self, key: int, version: int, body: dict) -> dict:
        corr = self.send(key, version, body)
        frame = self.recv_frame()
        assert frame is not None, f"broker closed the connection instead of answering API {key} v{version}"
        got_corr, resp = protocol.decode_response(key, version, frame)
        assert got_corr == corr
        return resp

    def closed_by_peer(self) -> bool:
        """True when the broker closed the connection (EOF within the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    # -- shortcuts ------------------------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, records: bytes, acks: int = -1, version: int = 7) -> dict:
        resp = self.call(0, version, {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
        return resp["responses"][0]["partition_responses"][0]

    def fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1,
              version: int = 11) -> dict:
        resp = self.call(1, version, {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
                                      "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                      "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                          {"partition": partition, "current_leader_epoch": -1,
                                           "fetch_offset": offset, "log_start_offset": -1,
                                           "partition_max_bytes": 1 << 20}]}],
                                      "forgotten_topics_data": [], "rack_id": ""})
        return resp["responses"][0]["partitions"][0]

    def create_topic(self, name: str, partitions: int = 1, configs: dict | None = None) -> dict:
        resp = self.call(19, 4, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                             "assignments": [],
                                             "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                                 "timeout_ms": 5000, "validate_only": False})
        return resp["topics"][0]


def batch(values, base_ts: int = 1_700_000_000_000, **kw) -> bytes:
    """One v2 record batch of ``values`` (timestamps base_ts, base_ts + 1, ...)."""
    return bytes(build_batch(values, timestamps=[base_ts + i for i in range(len(values))], **kw))
