"""The broker facade's server: Kafka's framing over asyncio, one request at a time per connection.

Frames on the wire (Kafka protocol guide)::

    RequestOrResponse => Size RequestMessage | ResponseMessage
      Size => int32                  bytes that follow; checked against socket.request.max.bytes before anything
                                     is allocated (a bigger one closes the connection, as Kafka's SocketServer does)
    Request Header v1 => request_api_key request_api_version correlation_id client_id   (v2: + TAG_BUFFER)
    Response Header v0 => correlation_id                                                 (v1: + TAG_BUFFER)

A connection is served in order: the next request is parsed only when the previous one's response was handed to
the transport (Kafka mutes a channel while a response is pending). Requests whose answer can wait (a Fetch long
poll, a JoinGroup/SyncGroup barrier) run as a task; the others are answered inline from ``data``/``buffer_updated``.
Frames are received into their own bytearray, so a Produce's record batches are stamped and written by the storage
engine where they landed (no copy of record data between the socket and the segment file).

``Broker`` runs the server on an event loop: in a background thread (``start``/``stop``, context manager) or on
the caller's loop (``await start_async()`` / ``await stop_async()``, ``await serve_forever()``). One Broker owns
one data dir as a shared-mode writer: embedded producers, consumers and the CLI may use the same dir beside it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import inspect
import logging
import os
import socket
import struct
import threading
import time
from pathlib import Path

from ..config import Config
from ..errors import InvalidConfigError, InvalidRequestError, KafkaError, UnsupportedVersionError
from ..storage import LogStore
from ..storage.files import BrokerLock, make_durable_dir
from . import protocol
from .api import ADVERTISED, API_HANDLERS, Pipelined, RequestContext, Services, run_sliced

log = logging.getLogger("kafkalog.broker")

_SIZE = struct.Struct(">i")
_SCRATCH = 65536
_DECODE_OFF_LOOP = 131072  # a bigger frame is decoded by a worker thread (Python codec), not on the loop
_WIRE_PARSED = frozenset({0, 1})  # Produce and Fetch: parsed by the Cython codec, in place, on the loop
_PIPELINE = 5  # acks=all produces one connection may have waiting for their fsync (Kafka clients' max.in.flight)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")


def parse_listener_url(value: str) -> tuple[str, str, int]:
    """'SASL_PLAINTEXT://127.0.0.1:9092', '127.0.0.1:9092' (PLAINTEXT) or ':9092' → (security protocol, host, port).
    A listener name mapped in listener.security.protocol.map is not supported: use the protocol as the name."""
    v = value.strip()
    if "," in v:
        v = v.split(",")[0].strip()
    scheme = "PLAINTEXT"
    if "://" in v:
        scheme, v = v.split("://", 1)
        scheme = scheme.upper()
        if scheme not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(f"listener {value!r}: the security protocol must be one of "
                                     f"{', '.join(SECURITY_PROTOCOLS)}")
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidConfigError(f"listener {value!r}: expected host:port")
    host = host.strip("[]") or "0.0.0.0"
    p = int(port)
    if not 0 <= p <= 65535:
        raise InvalidConfigError(f"listener {value!r}: port out of range")
    return scheme, host, p


def parse_listener(value: str) -> tuple[str, int]:
    """host and port of a listener (any security protocol)."""
    return parse_listener_url(value)[1:]


def _tls_context(config):
    import ssl
    cert = config["ssl.keystore.location"]
    if not cert:
        raise InvalidConfigError("an SSL listener needs ssl.keystore.location (a PEM certificate chain)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, config["ssl.key.location"] or None, config["ssl.key.password"] or None)
    except (OSError, ssl.SSLError) as e:
        raise InvalidConfigError(f"ssl.keystore.location={cert}: {e}") from None
    return ctx


class MemoryPool:
    """queued.max.request.bytes, across connections (Kafka's MemoryPool): a frame over the scratch buffer reserves
    its size before its buffer is allocated; a connection that cannot reserve stops reading and waits its turn
    (FIFO), so a thousand connections declaring 100 MB frames hold nothing but their 64 KiB scratch buffers. A
    frame bigger than the whole pool is granted when the pool is idle."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.available = capacity
        self.waiters: collections.deque = collections.deque()

    def try_reserve(self, n: int) -> bool:
        n = min(n, self.capacity)
        if self.waiters or self.available < n:
            return False
        self.available -= n
        return True

    def wait(self, conn, n: int) -> None:
        self.waiters.append((conn, n))

    def release(self, n: int) -> None:
        self.available += min(n, self.capacity)
        while self.waiters:
            conn, want = self.waiters[0]
            if conn.closed:
                self.waiters.popleft()
                continue
            if self.available < min(want, self.capacity):
                break
            self.waiters.popleft()
            self.available -= min(want, self.capacity)
            conn.granted(want)

    @property
    def used(self) -> int:
        return self.capacity - self.available


class Connection(asyncio.BufferedProtocol):
    """One client connection. Lives on the broker's loop thread only.

    Reading stops while a request is served (Kafka mutes a channel with a request in flight), while a throttle
    delay runs (KIP-219) and while a big frame waits for memory: what one connection holds is its scratch buffer,
    the frames parsed from one read, and at most one big frame reserved from the broker's MemoryPool."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.services = broker.services
        self.max_frame = broker.services.max_request_bytes
        self.pool: MemoryPool = broker.pool
        self.transport = None
        self.peer = "?"
        self.peer_host = "*"
        self.scratch = bytearray(_SCRATCH)
        self.sview = memoryview(self.scratch)
        self.slen = 0  # bytes of scratch filled
        self.frame = None  # bytearray being received directly (a frame bigger than what scratch holds)
        self.fview = None
        self.fpos = 0
        self.pending: collections.deque = collections.deque()  # (frame, bytes reserved) not yet processed
        self.reserved = 0  # bytes of the pool held by the frame being received
        self.serving = 0  # bytes of the pool held by the request being served
        self.granted_bytes = 0  # a reservation the pool granted while this connection waited
        # monotonic time the frame being received started, or was granted its memory (0: none). A frame waiting for
        # memory past request.receive.timeout.ms is dropped too: its client has given up by then (request.timeout.ms)
        self.partial_since = 0.0
        self.busy = False  # a request's task is running: later frames wait
        self.closed = False
        self.paused: set[str] = set()  # why reading is paused: "busy", "memory", "throttle"
        self.ctx = RequestContext(self)
        self.last_active = time.monotonic()
        self.muted = False  # KIP-219: nothing is read or processed until a throttle delay has passed
        # SASL: before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served
        self.authenticated = not broker.sasl
        self.sasl_server = None
        self.sasl_raw = False  # after SaslHandshake v0: the next frames are bare SASL tokens (no Kafka header)
        self.close_after_response = False
        self.closing = ""  # why the connection closes once the answers still owed are sent
        self.metrics = broker.metrics
        self.req_started = 0.0
        self.req_key = -1
        self.req_size = 0
        self.tasks: set = set()  # this connection's request tasks
        # answers owed in request order while acks=all produces wait for their fsync: [chunks or None, api key,
        # start time, request size]
        self.ordered: collections.deque = collections.deque()

    # -- asyncio protocol -----------------------------------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_host = peer[0] if isinstance(peer, tuple) else "*"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.broker.connections.add(self)

    def connection_lost(self, exc):
        self.closed = True
        self.broker.connections.discard(self)
        self._release_all()
        self.services.connection_closed(self)
        # a long poll or a group barrier of a client that went away stops here (its answer has nowhere to go)
        for t in list(self.tasks):
            t.cancel()

    def get_buffer(self, sizehint):
        if self.frame is not None:
            return self.fview[self.fpos:]
        return self.sview[self.slen:]

    def buffer_updated(self, nbytes):
        self.last_active = time.monotonic()
        if self.frame is not None:
            self.fpos += nbytes
            if self.fpos < len(self.frame):
                return
            self.pending.append((self.frame, self.reserved))
            self.frame = self.fview = None
            self.fpos = self.reserved = 0
        else:
            self.slen += nbytes
        if not self._split_scratch():
            return
        self._process()

    def eof_received(self):
        return False

    # -- flow control ---------------------------------------------------------------------------------------------

    def _pause(self, why: str) -> None:
        if not self.paused and not self.closed:
            try:
                self.transport.pause_reading()
            except (RuntimeError, AttributeError):
                pass
        self.paused.add(why)

    def _resume(self, why: str) -> None:
        if why not in self.paused:
            return
        self.paused.discard(why)
        if not self.paused and not self.closed:
            try:
                self.transport.resume_reading()
            except (RuntimeError, AttributeError):
                pass

    def granted(self, n: int) -> None:
        """The pool reserved ``n`` bytes for the frame this connection waits to receive (MemoryPool.release)."""
        self.granted_bytes = n
        self.partial_since = time.monotonic()  # a fresh request.receive.timeout.ms to receive what it was granted
        self._resume("memory")
        if self._split_scratch():
            self._process()

    def _release_all(self) -> None:
        n = self.reserved + self.serving + self.granted_bytes + sum(r for _f, r in self.pending)
        self.reserved = self.serving = self.granted_bytes = 0
        self.pending.clear()
        self.frame = self.fview = None
        if n:
            self.pool.release(n)

    # -- framing --------------------------------------------------------------------------------------------------

    def _split_scratch(self) -> bool:
        """Move complete frames out of scratch (and start a direct receive for a big one, once the pool has its
        memory); False on close."""
        if "memory" in self.paused or self.frame is not None:
            return not self.closed
        buf = self.scratch
        pos = 0
        n = self.slen
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame:
                self.close(f"request size {size} is outside [0, socket.request.max.bytes={self.max_frame}]")
                return False
            have = n - pos - 4
            if have >= size:
                self.pending.append((bytearray(self.sview[pos + 4:pos + 4 + size]), 0))
                pos += 4 + size
                continue
            if size > _SCRATCH - 4:
                if self.granted_bytes:
                    self.reserved, self.granted_bytes = self.granted_bytes, 0
                elif self.pool.try_reserve(size):
                    self.reserved = size
                else:
                    self._pause("memory")
                    self.pool.wait(self, size)
                    break
                frame = bytearray(size)
                frame[:have] = self.sview[pos + 4:n]
                self.frame = frame
                self.fview = memoryview(frame)
                self.fpos = have
                pos = n
            break
        if pos:
            rest = n - pos
            if rest:
                self.scratch[:rest] = self.sview[pos:n]
            self.slen = rest
        partial = self.slen > 0 or self.frame is not None
        if not partial:
            self.partial_since = 0.0
        elif not self.partial_since:
            self.partial_since = time.monotonic()
        return True

    def close(self, why: str | None = None, flush: bool = False) -> None:
        """Close now; with ``flush`` the answers already written are sent first (a protocol error after answered
        requests), else whatever is buffered is dropped (a hostile or dead peer)."""
        if self.closed:
            return
        self.closed = True
        if why:
            log.warning("closing connection from %s: %s", self.peer, why)
        if self.transport is not None:
            if flush:
                self.transport.close()
            else:
                self.transport.abort()

    # -- requests -------------------------------------------------------------------------------------------------

    def _close_after_owed(self, why: str) -> None:
        """Kafka closes a connection that sent a request it cannot parse; the answers still owed for the requests
        before it (acks=all produces waiting for their fsync) are sent first."""
        if not self.ordered:
            self.close(why, flush=True)
            return
        self.closing = why
        self.pending.clear()
        self._pause("closing")

    def _process(self) -> None:
        while self.pending and not self.busy and not self.closed and not self.muted and not self.closing:
            if len(self.ordered) >= _PIPELINE:
                break  # as many acks=all produces in flight as a client keeps (max.in.flight): wait for one
            frame, self.serving = self.pending.popleft()
            self.ctx.throttle_time_ms = 0
            self.req_started = time.perf_counter()
            self.req_key = -1
            self.req_size = len(frame) + 4
            try:
                out = self._handle(frame)
            except (InvalidRequestError, UnsupportedVersionError) as e:
                if self.metrics is not None:
                    self.metrics.failed(self.req_key)
                self._close_after_owed(str(e))
                return
            except Exception as e:  # a bug must not take the broker down: answered by closing this connection
                self._internal_error(e)
                return
            del frame
            if isinstance(out, Pipelined):
                # an acks=all produce waiting for its group commit: the next requests are served meanwhile, and
                # the answers still leave in request order
                entry = [None, self.req_key, self.req_started, self.req_size]
                self.ordered.append(entry)
                self._served()
                task = asyncio.ensure_future(out.coro)
                task.add_done_callback(functools.partial(self._pipelined_done, entry))
                self.broker.tasks.add(task)
                self.tasks.add(task)
                self._mute_if_throttled()
                continue
            if out is None or isinstance(out, list):
                self._respond(out)
                self._served()
                self._mute_if_throttled()
                continue
            self.busy = True
            task = asyncio.ensure_future(out)
            task.add_done_callback(self._done)
            self.broker.tasks.add(task)
            self.tasks.add(task)
        if self.closed:
            return
        # a frame waiting behind a request in flight stops reading until it is served (nothing piles up); with
        # none waiting, reading goes on, so a client that goes away is seen at once and its long poll cancelled
        if self.pending:
            self._pause("busy")
        else:
            self._resume("busy")

    def _respond(self, out) -> None:
        """Send an answer (None: no answer, acks=0), after the pipelined answers still owed before it."""
        if self.ordered:
            self.ordered.append([out if out is not None else [], self.req_key, self.req_started, self.req_size])
            return
        self._answered(self._write(out) if out is not None else 0)

    def _pipelined_done(self, entry, task) -> None:
        self.broker.tasks.discard(task)
        self.tasks.discard(task)
        if self.closed:
            return
        if task.cancelled():
            self.close()
            return
        exc = task.exception()
        if exc is not None:
            self._internal_error(exc)
            return
        entry[0] = task.result()
        while self.ordered and self.ordered[0][0] is not None:
            out, key, started, size = self.ordered.popleft()
            n = self._write(out) if out else 0
            if self.metrics is not None:
                self.metrics.observe(key, started, size, n)
        if self.closing and not self.ordered:
            self.close(self.closing, flush=True)
            return
        if self.close_after_response and not self.ordered and not self.closed:
            self.closed = True
            self.transport.close()
        if self.pending and not self.busy:
            self._process()

    def _served(self) -> None:
        if self.serving:
            n, self.serving = self.serving, 0
            self.pool.release(n)

    def _internal_error(self, e: BaseException) -> None:
        log.error("internal error serving %s (API key %d); closing the connection", self.peer, self.req_key,
                  exc_info=(type(e), e, e.__traceback__))
        self.close(f"internal error: {type(e).__name__}: {e}")

    def _done(self, task) -> None:
        self.broker.tasks.discard(task)
        self.tasks.discard(task)
        self.busy = False
        self._served()
        if task.cancelled():
            self.close()
            return
        exc = task.exception()
        if exc is not None:
            if self.metrics is not None:
                self.metrics.failed(self.req_key)
            if isinstance(exc, (InvalidRequestError, UnsupportedVersionError)):
                self._close_after_owed(str(exc))
            else:
                self._internal_error(exc)
            return
        self._respond(task.result())
        self._mute_if_throttled()
        self._process()

    def _mute_if_throttled(self) -> None:
        """KIP-219: after a throttled response, stop reading this connection for the throttle time (a client that
        ignores throttle_time_ms is held back by TCP)."""
        ms = self.ctx.throttle_time_ms
        if ms <= 0 or self.closed:
            return
        self.muted = True
        self._pause("throttle")
        asyncio.get_running_loop().call_later(ms / 1000.0, self._unmute)

    def _unmute(self) -> None:
        if self.closed:
            return
        self.muted = False
        self._resume("throttle")
        self._process()

    def _answered(self, nbytes_out: int) -> None:
        if self.metrics is not None:
            self.metrics.observe(self.req_key, self.req_started, self.req_size, nbytes_out)
        if self.close_after_response and not self.closed and not self.ordered:
            self.closed = True
            self.transport.close()  # flushes the answer first

    def _write(self, chunks) -> int:
        if self.closed:
            return 0
        if len(chunks) == 1:
            self.transport.write(chunks[0])
            return len(chunks[0])
        self.transport.writelines(chunks)
        return sum(len(c) for c in chunks)

    def _handle(self, frame: bytearray):
        if self.sasl_raw:
            return self.services.sasl_raw_token(self, frame)
        header, offset = protocol.read_request_header(frame)
        key, version = header.api_key, header.api_version
        self.req_key = key
        if not self.authenticated and key not in (17, 18, 36):
            name = protocol.API_NAMES.get(key, str(key))
            raise InvalidRequestError(f"{name} request before SASL authentication completed")
        self.ctx.client_id = header.client_id
        handler = API_HANDLERS.get(key)
        rng = ADVERTISED.get(key)
        if key == 18 and (version < rng[0] or version > rng[1]):
            # KIP-511: an ApiVersions version we do not know is answered as v0 with UNSUPPORTED_VERSION and our
            # ApiVersions range, so the client can retry with one we support
            return protocol.encode_response(18, 0, header.correlation_id, {
                "error_code": UnsupportedVersionError.code,
                "api_keys": [{"api_key": 18, "min_version": rng[0], "max_version": rng[1]}]})
        if handler is None or rng is None:
            raise InvalidRequestError(f"unknown API key {key} (correlation id {header.correlation_id})")
        if not rng[0] <= version <= rng[1] or (key == 0 and version < 3):
            name = protocol.API_NAMES.get(key, str(key))
            raise UnsupportedVersionError(f"{name} v{version} is not supported (advertised {rng[0]}-{rng[1]}"
                                          + (", Produce below v3 needs message format v0/v1" if key == 0 else "")
                                          + ")")
        if len(frame) > _DECODE_OFF_LOOP and key not in _WIRE_PARSED:
            return self._decode_off_loop(handler, header, frame, offset)
        out = handler(self.services, self.ctx, header, frame, offset)
        return run_sliced(out) if inspect.isgenerator(out) else out

    async def _decode_off_loop(self, handler, header, frame, offset):
        """A big frame's body is decoded by a worker thread (the loop gets the GIL every switch interval meanwhile),
        then the handler runs on the loop in time slices."""
        loop = asyncio.get_running_loop()
        self.ctx.body = await loop.run_in_executor(None, protocol.decode_request, header.api_key,
                                                   header.api_version, frame, offset)
        out = handler(self.services, self.ctx, header, frame, offset)
        if inspect.isgenerator(out):
            out = run_sliced(out)
        if isinstance(out, Pipelined):
            out = out.coro
        if asyncio.iscoroutine(out):
            out = await out
        return out


class Broker:
    """A Kafka-compatible broker over one kafkalog data dir.

    ``Broker(data_dir=None, listen=None, config=None, *, metrics=None)``: ``listen`` is ``host:port`` (port 0 picks a
    free port; default the ``listeners`` config key, else 127.0.0.1:9092); ``config`` holds Kafka's server.properties
    keys (``auto.create.topics.enable``, ``num.partitions``, ``log.segment.bytes``,
    ``group.initial.rebalance.delay.ms``, ...) and any store/topic default. ``data_dir`` defaults to ``log.dirs``.

    Thread safety: ``start``/``stop`` from any one thread; everything else runs on the broker's loop.
    """

    def __init__(self, data_dir=None, listen: str | None = None, config=None, *, metrics: str | None = None):
        self.config = config if isinstance(config, Config) else Config(config)
        data_dir = data_dir or self.config["log.dirs"].split(",")[0] or self.config["log.dir"]
        if not data_dir:
            raise InvalidConfigError("no data dir: pass data_dir or set log.dirs")
        self.data_dir = Path(data_dir)
        self.security_protocol, self.host, self._port = parse_listener_url(listen or self.config["listeners"])
        self.sasl = self.security_protocol.startswith("SASL_")
        self.tls = _tls_context(self.config) if self.security_protocol.endswith("SSL") else None
        self.port = self._port
        self.connections: set[Connection] = set()
        self.tasks: set = set()
        self.pool = MemoryPool(self.config["queued.max.request.bytes"])
        self.store: LogStore | None = None
        self.services: Services | None = None
        self._server = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self.started_at = 0.0
        self.metrics_listen = parse_listener(metrics) if metrics else None
        self.metrics = None
        self.metrics_port = 0
        self.shutdown_error: BaseException | None = None  # the first failure of stop_async, if any
        self._broker_lock: BrokerLock | None = None
        self._faults = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def faults(self):
        """The broker's fault injection (``broker/faults.py``: fail the next produces with a Kafka error, stall a
        partition), made on first use; the same object after a ``restart()``, its rules and stalls ended by the stop
        (as a ``kafkalog serve`` process's end with it). A broker that never asks has none and pays nothing for it."""
        if self._faults is None:
            from .faults import Faults
            self._faults = Faults()
            if self.services is not None:
                self.services.faults = self._faults
        return self._faults

    @property
    def faults_if_on(self):
        return self._faults

    # -- on a loop ------------------------------------------------------------------------------------------------

    async def start_async(self) -> None:
        """Open the data dir and listen (on the running loop)."""
        if self._server is not None:
            raise RuntimeError("broker already started")
        self._loop = asyncio.get_running_loop()
        # the worker threads of fsyncs (acks=all group commits, one per partition), the transaction coordinator
        # and other blocking storage calls: enough for the disk to work on many files at once (asyncio's default,
        # min(32, cores + 4), is 6 on two cores, and 32 transactional producers queued behind it)
        self._loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
            max_workers=64, thread_name_prefix="kafkalog-io"))
        self._stopped = asyncio.Event()
        # one broker per data dir, as Kafka's locked log dir: a second one fails here, naming the first
        make_durable_dir(self.data_dir)  # a new data dir's entry survives a power loss (so do its topics)
        self._broker_lock = BrokerLock(self.data_dir)
        self._broker_lock.acquire("start broker")
        try:
            self.store = LogStore(self.data_dir, self.config)
        except BaseException:
            self._broker_lock.close()
            raise
        try:
            advertised = self.config["advertised.listeners"]
            self.services = Services(self, self.store, self.config)
            self._server = await self._loop.create_server(lambda: Connection(self), self.host, self._port,
                                                          reuse_address=True, backlog=1024, ssl=self.tls)
            self.port = self._server.sockets[0].getsockname()[1]
            if advertised:
                self.services.advertise(*parse_listener(advertised))
            else:
                host = self.host if self.host not in ("0.0.0.0", "::", "") else socket.gethostname()
                self.services.advertise(host, self.port)
            self.services.start()
            if self.metrics_listen is not None:
                from .metrics import BrokerMetrics
                self.metrics = BrokerMetrics(self.services, protocol.API_NAMES)
                self.metrics_port = await self.metrics.serve(*self.metrics_listen)
                log.info("metrics on http://%s:%d/metrics", self.metrics_listen[0], self.metrics_port)
        except BaseException:
            if self._server is not None:
                self._server.close()
                self._server = None
            if self.services is not None:
                self.services.close()
            self.store.close()
            self.store = None
            self._broker_lock.close()
            raise
        self._broker_lock.describe(f"kafkalog broker pid {os.getpid()} listening on {self.host}:{self.port}")
        self.started_at = time.time()
        log.info("kafkalog broker listening on %s:%d (data dir %s)", self.host, self.port, self.data_dir)

    async def stop_async(self) -> None:
        """Stop listening, close every connection, close the store (clean-shutdown marker written). Every step runs
        even when one fails, and the broker counts as stopped (``serve_forever`` returns); the first failure is
        kept in ``shutdown_error`` and raised at the end."""
        if self._server is None:
            return
        errors: list[BaseException] = []

        async def step(fn):
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as e:  # noqa: BLE001  (every step runs; the first failure is raised below)
                log.error("broker shutdown: %s failed: %s", getattr(fn, "__qualname__", fn), e)
                errors.append(e)

        try:
            await step(self._server.close)
            if self.metrics is not None:
                await step(self.metrics.close)
            for c in list(self.connections):
                await step(c.close)
            for t in list(self.tasks):
                t.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
            await asyncio.sleep(0)  # let aborted connections run connection_lost
            self._server = None
            await step(self.services.close)
            await step(self.store.close)
            self.store = None
        finally:
            self._server = None
            if self._faults is not None:
                self._faults.reset()  # faults end with the serving broker, in a thread as in a process
            if self._broker_lock is not None:
                self._broker_lock.close()
            self._stopped.set()
        if errors:
            self.shutdown_error = errors[0]
            raise errors[0]

    async def restart_async(self) -> None:
        """Stop, then open the same data dir and listen on the same port again (clients reconnect to the address
        they know): what a broker's restart does to its clients, for their tests. Injected faults end."""
        self._port = self.port
        await self.stop_async()
        await self.start_async()

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start_async()
        await self._stopped.wait()

    # -- in a thread ----------------------------------------------------------------------------------------------

    def start(self) -> Broker:
        """Serve from a background thread with its own event loop (uvloop when installed); returns when
        listening, or raises what prevented it."""
        if self._thread is not None:
            raise RuntimeError("broker already started")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run():
            loop = new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as e:
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self._stopped.wait())
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"kafkalog-broker-{self._port}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            fut = asyncio.run_coroutine_threadsafe(self.stop_async(), loop)
            try:
                fut.result(timeout=30)
            except Exception:
                log.exception("broker stop failed")
        self._thread.join(timeout=30)
        self._thread = None
        self._loop = None

    def restart(self) -> Broker:
        """``stop()`` then ``start()`` on the same data dir and port (a broker started with ``start()``); injected
        faults end."""
        if self._thread is None:
            raise RuntimeError("restart() restarts a broker started with start(); on a loop: await restart_async()")
        self._port = self.port
        self.stop()
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"Broker({str(self.data_dir)!r}, listen='{self.host}:{self.port}')"


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


__all__ = ["Broker", "KafkaError", "parse_listener", "parse_listener_url", "new_event_loop"]
