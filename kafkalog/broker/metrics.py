"""Prometheus metrics of the broker (``kafkalog serve --metrics HOST:PORT``), in the text exposition format.

Served on the broker's own event loop (a minimal HTTP/1.1 GET handler), so every value is read on the thread that
owns it and a scrape never races the broker. Names:

    kafkalog_requests_total{api}                         requests answered (or not, acks=0), per API
    kafkalog_request_latency_seconds{api}                histogram: frame received -> response handed to the socket
    kafkalog_request_errors_total{api}                   requests that closed their connection (bad input)
    kafkalog_network_bytes_in_total / _out_total         bytes of request / response frames
    kafkalog_connections                                 open client connections
    kafkalog_quota_byte_rate{client_id,quota}            KIP-13 measured rate (quota = producer_byte_rate or
                                                         consumer_byte_rate)
    kafkalog_quota_limit_bytes_per_second{client_id,quota}
    kafkalog_quota_throttle_time_ms_total{client_id,quota}, kafkalog_quota_throttled_requests_total{...}
                                                         (series of a client id idle for an hour are dropped)
    kafkalog_fetch_sessions                              KIP-227 NumIncrementalFetchSessions
    kafkalog_fetch_session_partitions_cached             NumIncrementalFetchPartitionsCached
    kafkalog_fetch_session_evictions_per_second          IncrementalFetchSessionEvictionsPerSec (+ _total)
    kafkalog_log_start_offset / _end_offset / _size_bytes{topic,partition}
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("kafkalog.broker")

try:
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError:  # pragma: no cover - the broker extra installs it
    CollectorRegistry = None

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)


class BrokerMetrics:
    """Counters updated by the server, plus a collector that reads the broker's state at scrape time. Loop thread
    only."""

    def __init__(self, services, api_names: dict[int, str]):
        if CollectorRegistry is None:
            raise ImportError("metrics need prometheus-client: pip install 'kafkalog[broker]'")
        self.s = services
        self.registry = CollectorRegistry(auto_describe=True)
        self.names = dict(api_names)
        self.requests = Counter("kafkalog_requests", "Requests handled, per API", ["api"], registry=self.registry)
        self.errors = Counter("kafkalog_request_errors", "Requests that closed their connection (bad input)",
                              ["api"], registry=self.registry)
        self.latency = Histogram("kafkalog_request_latency_seconds", "From a request frame received to its response "
                                 "handed to the socket", ["api"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.bytes_in = Counter("kafkalog_network_bytes_in", "Bytes of request frames", registry=self.registry)
        self.bytes_out = Counter("kafkalog_network_bytes_out", "Bytes of response frames", registry=self.registry)
        self._children: dict[int, tuple] = {}
        self.registry.register(_StateCollector(services))
        self._server = None

    def _child(self, api_key: int):
        c = self._children.get(api_key)
        if c is None:
            name = self.names.get(api_key, str(api_key))
            c = self._children[api_key] = (self.requests.labels(name), self.latency.labels(name),
                                           self.errors.labels(name))
        return c

    def observe(self, api_key: int, started: float, nbytes_in: int, nbytes_out: int) -> None:
        req, lat, _ = self._child(api_key)
        req.inc()
        lat.observe(time.perf_counter() - started)
        self.bytes_in.inc(nbytes_in)
        if nbytes_out:
            self.bytes_out.inc(nbytes_out)

    def failed(self, api_key: int) -> None:
        self._child(api_key)[2].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- HTTP -----------------------------------------------------------------------------------------------------

    async def serve(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._http, host, port, reuse_address=True)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _http(self, reader, writer) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            while True:  # headers
                h = await asyncio.wait_for(reader.readline(), 10)
                if h in (b"\r\n", b"\n", b""):
                    break
            parts = line.split()
            if len(parts) < 2 or parts[0] != b"GET":
                status, body, ctype = b"405 Method Not Allowed", b"only GET\n", b"text/plain"
            elif parts[1].split(b"?")[0] not in (b"/metrics", b"/"):
                status, body, ctype = b"404 Not Found", b"see /metrics\n", b"text/plain"
            else:
                status, body = b"200 OK", self.render()
                ctype = b"text/plain; version=0.0.4; charset=utf-8"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


class _StateCollector:
    """Gauges read from the broker at scrape time."""

    def __init__(self, services):
        self.s = services

    def describe(self):
        return []

    def collect(self):
        s = self.s
        g = GaugeMetricFamily("kafkalog_connections", "Open client connections")
        g.add_metric([], len(s.broker.connections))
        yield g
        q = s.quotas
        q.maybe_expire()  # a client id idle for long has no series (a quiet broker sweeps here)
        rate = GaugeMetricFamily("kafkalog_quota_byte_rate", "Measured byte rate (KIP-13 window)",
                                 labels=["client_id", "quota"])
        limit = GaugeMetricFamily("kafkalog_quota_limit_bytes_per_second", "The quota in force",
                                  labels=["client_id", "quota"])
        ttotal = CounterMetricFamily("kafkalog_quota_throttle_time_ms", "Throttle time given",
                                     labels=["client_id", "quota"])
        tcount = CounterMetricFamily("kafkalog_quota_throttled_requests", "Requests throttled",
                                     labels=["client_id", "quota"])
        now = q.clock()
        for (kind, cid), st in sorted(q.stats.items()):
            labels = [cid, kind]
            rate.add_metric(labels, st.rate.measure(now))
            bound = q.quota(kind, cid)
            if bound is not None:
                limit.add_metric(labels, bound)
            ttotal.add_metric(labels, st.throttle_total_ms)
            tcount.add_metric(labels, st.throttled_requests)
        yield rate
        yield limit
        yield ttotal
        yield tcount
        sessions = getattr(s, "fetch_sessions", None)
        g1 = GaugeMetricFamily("kafkalog_fetch_sessions", "KIP-227 NumIncrementalFetchSessions")
        g2 = GaugeMetricFamily("kafkalog_fetch_session_partitions_cached",
                               "KIP-227 NumIncrementalFetchPartitionsCached")
        g3 = GaugeMetricFamily("kafkalog_fetch_session_evictions_per_second",
                               "KIP-227 IncrementalFetchSessionEvictionsPerSec")
        c3 = CounterMetricFamily("kafkalog_fetch_session_evictions", "Fetch sessions evicted")
        if sessions is not None:
            g1.add_metric([], sessions.num_sessions)
            g2.add_metric([], sessions.num_partitions_cached)
            g3.add_metric([], sessions.eviction_rate())
            c3.add_metric([], sessions.evictions_total)
        yield g1
        yield g2
        yield g3
        yield c3
        start = GaugeMetricFamily("kafkalog_log_start_offset", "Log start offset", labels=["topic", "partition"])
        end = GaugeMetricFamily("kafkalog_log_end_offset", "Log end offset (high watermark)",
                                labels=["topic", "partition"])
        size = GaugeMetricFamily("kafkalog_log_size_bytes", "Bytes of the partition's segments",
                                 labels=["topic", "partition"])
        store = s.store
        for topic in sorted(store.topics()):
            try:
                n = store.partitions_for(topic)
            except Exception:  # deleted meanwhile
                continue
            for p in range(n):
                try:
                    lg = s.log(topic, p)
                    labels = [topic, str(p)]
                    start.add_metric(labels, lg.log_start_offset)
                    end.add_metric(labels, lg.log_end_offset)
                    size.add_metric(labels, lg.size_in_bytes)
                except Exception as e:  # a partition being deleted: skip it this scrape
                    log.debug("metrics: %s-%d: %r", topic, p, e)
        yield start
        yield end
        yield size
