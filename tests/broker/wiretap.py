"""A loopback TCP proxy that records every request frame a client sends (and the bytes each way), for tests and
benchmarks that must see what is on the wire. The broker advertises the proxy's port, so metadata and coordinator
redirects also go through it."""

from __future__ import annotations

import socket
import struct
import threading

from kafkalog.broker import protocol


class WireTap:
    def __init__(self, listen_port: int = 0):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", listen_port))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.target = None
        self.requests: list[tuple[int, int, dict | None]] = []  # (api key, version, decoded Fetch body or None)
        self.bytes_up = 0
        self.bytes_down = 0
        self.lock = threading.Lock()
        self._stop = False
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self, target_port: int) -> WireTap:
        self.target = target_port
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop = True
        self.srv.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.bytes_up = self.bytes_down = 0

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.target))
            self._socks += [c, u]
            threading.Thread(target=self._pipe, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, False), daemon=True).start()

    def _pipe(self, src, dst, up: bool) -> None:
        """Copy src to dst; client-to-broker bytes (``up``) are also cut into request frames and recorded."""
        buf = bytearray()
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                _shut(dst)
                return
            with self.lock:
                if up:
                    self.bytes_up += len(data)
                else:
                    self.bytes_down += len(data)
            if up:
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + size:
                        break
                    frame = bytes(buf[4:4 + size])
                    del buf[:4 + size]
                    self._record(frame)
            try:
                dst.sendall(data)
            except OSError:
                return

    def _record(self, frame: bytes) -> None:
        try:
            header, off = protocol.read_request_header(frame)
        except Exception:
            return
        body = None
        if header.api_key == 1:
            try:
                body = protocol.decode_request(1, header.api_version, frame, off)
            except Exception:
                body = None
        with self.lock:
            self.requests.append((header.api_key, header.api_version, body))

    def fetches(self) -> list[dict]:
        with self.lock:
            return [b for k, _v, b in self.requests if k == 1 and b is not None]


def _shut(s) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
