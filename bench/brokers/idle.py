"""bench/broker.py's idle RSS (b3): a fresh broker holding IDLE_CONNECTIONS sockets that each did one ApiVersions v0."""

from __future__ import annotations

import socket
import struct
import time

from .procs import BrokerProcess

IDLE_CONNECTIONS = 100

def api_versions_v0(correlation_id: int) -> bytes:
    client_id = b"bench-idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf


def idle_rss(broker: BrokerProcess, connections: int = IDLE_CONNECTIONS) -> dict:
    """RSS before and with `connections` sockets that each did one ApiVersions v0 and then stay idle."""
    time.sleep(0.5)
    before = broker.memory()
    socks = []
    try:
        for i in range(connections):
            s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            s.sendall(api_versions_v0(i))
            size = struct.unpack(">i", recv_exact(s, 4))[0]
            corr, error = struct.unpack(">ih", recv_exact(s, size)[:6])
            if corr != i or error != 0:
                raise RuntimeError(f"ApiVersions v0 answered correlation {corr} error {error}")
            socks.append(s)
        time.sleep(1.0)
        alive = sum(1 for s in socks if _still_open(s))
        return {"connections": connections, "open_after_idle": alive, "before": before, **broker.memory()}
    finally:
        for s in socks:
            s.close()


def _still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)
