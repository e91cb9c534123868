"""Client quotas (KIP-13, with KIP-219's muting): produce and fetch byte rates per client id.

A quota is a bound on bytes per second for one client id (``quota.producer.default`` / ``quota.consumer.default``
for every id, overrides per id; clients with no client id share the quota of the empty id ""). Each (kind, client
id) has a windowed rate, as Kafka's ``Rate`` over a ``SampledStat``::

    samples      quota.window.num (11) samples of quota.window.size.seconds (1) each
    record(v)    add v to the current sample; a sample older than one window starts the next one
    obsolete     a sample whose window started samples x window ago or earlier is reset before measuring
    window(now)  now - start of the oldest sample, but at least (samples - 1) full windows (so a new client's first
                 burst is spread over 10 s instead of measured over a few milliseconds)
    rate         sum of the samples / window

When recording makes the rate exceed the quota, the delay is the seed's formula, written with the rate:
``(bytes in window - quota x window) / quota = (rate - quota) / quota x window``, in ms, rounded (Kafka's
``ClientQuotaManager.throttleTime``). A produce is appended first and answered at once with that
``throttle_time_ms``; a fetch over its quota is not read: it is answered empty with ``throttle_time_ms`` and its
bytes are not counted. Either way the connection is then muted (nothing more is read from it) until the delay has
passed, so a client that ignores ``throttle_time_ms`` is held back by TCP (KIP-219).

Quotas can be changed while running (AlterClientQuotas, ``kafkalog quotas``). As in Kafka, such dynamic quotas
override the static ``quota.*`` keys of server.properties without replacing them: ``.kafkalog-broker/quotas.json``
holds the dynamic quotas only (so they survive restarts), and the static keys are read afresh at every start. The
quota of a client id is, most specific first::

    dynamic quota of the client id > static quota.*.override of the client id
        > dynamic default (the <default> client id) > static quota.*.default

Removing a dynamic quota (``remove`` in AlterClientQuotas, ``--producer-byte-rate none``) falls back to what comes
after it; a static quota is changed in server.properties.

The rate of a client id nobody has heard from for ``expire_s`` (Kafka's InactiveSensorExpirationTimeSeconds, one
hour; never less than the rate window, so forgetting a client never changes what it is measured at) and whose last
throttle delay is over is forgotten, and with it its metric series: a broker seeing many short-lived client ids does
not grow. The sweep is lazy (no thread): at most every ``min(60 s, expire_s / 2)``, done by whichever request is
recorded, or metrics scrape made, first. Loop thread only.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

from ..errors import InvalidConfigError, InvalidRequestError
from ..storage.files import atomic_write, make_durable_dir

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
KINDS = (PRODUCE, FETCH)
STATE_VERSION = 2  # 1 (no "version"): static and dynamic quotas mixed
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}

log = logging.getLogger("kafkalog.broker")


def parse_rate(text: str, key: str) -> float:
    """'2M' = 2 MiB/s, '500K', '1048576' (bytes per second)."""
    t = str(text).strip().upper().removesuffix("B")
    unit = t[-1:] if t[-1:] in ("K", "M", "G") else ""
    num = t[:-1] if unit else t
    try:
        v = float(num) * _UNITS[unit]
    except ValueError:
        raise InvalidConfigError(f"{key}={text!r}: expected bytes per second like 1048576, 500K or 2M") from None
    if not v > 0 or math.isinf(v):
        raise InvalidConfigError(f"{key}={text!r}: must be a positive rate")
    return v


def parse_overrides(text: str, key: str) -> dict[str, float]:
    """'clientA:4M,clientB:10M' → {clientA: 4 MiB/s, clientB: 10 MiB/s}."""
    out: dict[str, float] = {}
    for part in str(text).strip().strip('"').split(","):
        part = part.strip()
        if not part:
            continue
        cid, sep, rate = part.rpartition(":")
        if not sep:
            raise InvalidConfigError(f"{key}: {part!r} is not client:rate")
        out[cid] = parse_rate(rate, key)
    return out


class Rate:
    """Kafka's Rate over a SampledStat (see the module docstring). Times in seconds."""

    __slots__ = ("samples", "window", "starts", "values", "current")

    def __init__(self, samples: int, window_s: float, now: float):
        self.samples = samples
        self.window = window_s
        self.starts = [now]
        self.values = [0.0]
        self.current = 0

    def _purge(self, now: float) -> None:
        expire = self.samples * self.window
        for i, start in enumerate(self.starts):
            if now - start >= expire:
                self.starts[i] = now
                self.values[i] = 0.0

    def record(self, value: float, now: float) -> None:
        if now - self.starts[self.current] >= self.window:
            self.current = (self.current + 1) % self.samples
            if self.current >= len(self.starts):
                self.starts.append(now)
                self.values.append(0.0)
            else:
                self.starts[self.current] = now
                self.values[self.current] = 0.0
        self.values[self.current] += value

    def window_size(self, now: float) -> float:
        elapsed = now - min(self.starts)
        full = int(elapsed / self.window)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window
        return max(elapsed, 0.001)

    def measure(self, now: float) -> float:
        self._purge(now)
        return sum(self.values) / self.window_size(now)


class ClientStats:
    """Per (kind, client id): the rate and what throttling it got (for metrics)."""

    __slots__ = ("rate", "throttle_total_ms", "throttled_requests", "requests", "last_throttle_ms", "last_used",
                 "throttled_until")

    def __init__(self, rate: Rate, now: float):
        self.rate = rate
        self.throttle_total_ms = 0
        self.throttled_requests = 0
        self.requests = 0
        self.last_throttle_ms = 0
        self.last_used = now
        self.throttled_until = now  # the end of the last throttle delay given


class ClientQuotas:
    """The broker's quota manager. ``clock`` returns seconds (injectable for tests); ``expire_s`` is how long an idle
    client id's rate is kept (see the module docstring)."""

    EXPIRE_S = 3600.0  # Kafka drops a client's sensors after an hour without use
    SWEEP_MAX_S = 60.0

    def __init__(self, config, state_path: Path | None = None, clock=time.monotonic, expire_s: float | None = None):
        self.clock = clock
        self.samples = config["quota.window.num"]
        self.window_s = float(config["quota.window.size.seconds"])
        # server.properties: read at every start, never written to the state file
        self.static_defaults: dict[str, float | None] = {
            PRODUCE: parse_rate(config["quota.producer.default"], "quota.producer.default")
            if config["quota.producer.default"] else None,
            FETCH: parse_rate(config["quota.consumer.default"], "quota.consumer.default")
            if config["quota.consumer.default"] else None}
        self.static_overrides: dict[str, dict[str, float]] = {
            PRODUCE: parse_overrides(config["quota.producer.override"], "quota.producer.override"),
            FETCH: parse_overrides(config["quota.consumer.override"], "quota.consumer.override")}
        # AlterClientQuotas: kept in the state file
        self.dynamic_defaults: dict[str, float] = {}
        self.dynamic_overrides: dict[str, dict[str, float]] = {PRODUCE: {}, FETCH: {}}
        self.state_path = state_path
        self.stats: dict[tuple[str, str], ClientStats] = {}
        self.expire_s = max(float(self.EXPIRE_S if expire_s is None else expire_s), self.samples * self.window_s)
        self.sweep_every = min(self.SWEEP_MAX_S, self.expire_s / 2)
        self._next_sweep = clock() + self.sweep_every
        self._load()

    # -- configuration --------------------------------------------------------------------------------------------

    def _load(self) -> None:
        if self.state_path is None:
            return
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        legacy = data.get("version") is None
        for kind in KINDS:
            d = data.get(kind) or {}
            v = d.get("default")
            if v is not None and not (legacy and float(v) == self.static_defaults[kind]):
                self.dynamic_defaults[kind] = float(v)
            static = self.static_overrides[kind]
            for cid, v in (d.get("clients") or {}).items():
                if v is not None and not (legacy and float(v) == static.get(cid)):
                    self.dynamic_overrides[kind][cid] = float(v)
        if legacy:
            # a file written when static and dynamic quotas were stored together: what equals server.properties is
            # taken for static (server.properties rules it from now on), the rest is kept as dynamic overrides
            log.info("quotas: %s converted to dynamic overrides only: %s", self.state_path,
                     self._dynamic_summary() or "none")
            try:
                self._save()
            except OSError as e:  # read as converted all the same; written at the next change
                log.warning("quotas: could not rewrite %s: %s", self.state_path, e)

    def _dynamic_summary(self) -> str:
        parts = [f"{kind} <default>={v:g}" for kind, v in self.dynamic_defaults.items()]
        parts += [f"{kind} {cid!r}={v:g}" for kind in KINDS for cid, v in sorted(self.dynamic_overrides[kind].items())]
        return ", ".join(parts)

    def _save(self) -> None:
        if self.state_path is None:
            return
        data: dict = {"version": STATE_VERSION}
        for kind in KINDS:
            d: dict = {"clients": self.dynamic_overrides[kind]}
            if kind in self.dynamic_defaults:
                d["default"] = self.dynamic_defaults[kind]
            data[kind] = d
        make_durable_dir(self.state_path.parent)
        atomic_write(self.state_path, json.dumps(data, indent=1, sort_keys=True).encode())

    @property
    def enabled(self) -> bool:
        return bool(self.dynamic_defaults or any(self.static_defaults.values()) or any(self.static_overrides.values())
                    or any(self.dynamic_overrides.values()))

    def default_quota(self, kind: str) -> float | None:
        v = self.dynamic_defaults.get(kind)
        return v if v is not None else self.static_defaults[kind]

    def quota(self, kind: str, client_id: str | None) -> float | None:
        cid = client_id or ""
        v = self.dynamic_overrides[kind].get(cid)
        if v is None:
            v = self.static_overrides[kind].get(cid)
        return v if v is not None else self.default_quota(kind)

    def set_quota(self, kind: str, client_id: str | None, rate: float | None) -> None:
        """A dynamic quota: ``client_id`` None = the default for every client; ``rate`` None removes the dynamic
        quota, so the static one (server.properties), if any, applies again."""
        if kind not in KINDS:
            raise InvalidRequestError(f"unknown quota key {kind!r} (known: {', '.join(KINDS)})")
        if rate is not None and not rate > 0:
            raise InvalidRequestError(f"{kind}={rate}: must be a positive rate")
        if client_id is None:
            if rate is None:
                self.dynamic_defaults.pop(kind, None)
            else:
                self.dynamic_defaults[kind] = float(rate)
        elif rate is None:
            self.dynamic_overrides[kind].pop(client_id, None)
        else:
            self.dynamic_overrides[kind][client_id] = float(rate)
        self._save()

    def describe(self) -> list[tuple[str | None, str, float]]:
        """(client id or None for the default, kind, rate) of every quota in force, static or dynamic."""
        out: list[tuple[str | None, str, float]] = []
        for kind in KINDS:
            default = self.default_quota(kind)
            if default:
                out.append((None, kind, default))
            cids = set(self.static_overrides[kind]) | set(self.dynamic_overrides[kind])
            out.extend((cid, kind, self.quota(kind, cid)) for cid in sorted(cids))
        return out

    # -- recording ------------------------------------------------------------------------------------------------

    def _stats(self, kind: str, cid: str, now: float) -> ClientStats:
        st = self.stats.get((kind, cid))
        if st is None:
            st = self.stats[(kind, cid)] = ClientStats(Rate(self.samples, self.window_s, now), now)
        st.last_used = now
        return st

    def _throttle_ms(self, st: ClientStats, bound: float | None, now: float) -> int:
        if bound is None:
            return 0
        rate = st.rate.measure(now)
        if rate <= bound:
            return 0
        return round((rate - bound) / bound * st.rate.window_size(now) * 1000.0)

    def record_produce(self, client_id: str | None, nbytes: int) -> int:
        """After an append: count the request's bytes; the throttle time in ms (0 when within quota)."""
        return self._record(PRODUCE, client_id, nbytes, take_back=False)

    def record_fetch(self, client_id: str | None, nbytes: int) -> int:
        """Before answering a fetch of ``nbytes``: the throttle time in ms; when it is > 0 the bytes are taken back
        (the read is not sent) and the caller answers an empty response."""
        return self._record(FETCH, client_id, nbytes, take_back=True)

    def _record(self, kind: str, client_id: str | None, nbytes: int, take_back: bool) -> int:
        now = self.clock()
        if now >= self._next_sweep:
            self.expire(now)
        cid = client_id or ""
        st = self._stats(kind, cid, now)
        st.rate.record(nbytes, now)
        st.requests += 1
        ms = self._throttle_ms(st, self.quota(kind, cid), now)
        if ms > 0 and take_back:
            st.rate.record(-nbytes, now)
        st.last_throttle_ms = ms
        if ms > 0:
            st.throttle_total_ms += ms
            st.throttled_requests += 1
            st.throttled_until = max(st.throttled_until, now + ms / 1000.0)
        return ms

    def byte_rate(self, kind: str, client_id: str | None) -> float:
        st = self.stats.get((kind, client_id or ""))
        return st.rate.measure(self.clock()) if st is not None else 0.0

    def maybe_expire(self) -> None:
        """Sweep idle clients if the last sweep is ``sweep_every`` old (cheap to call often: metrics scrapes)."""
        now = self.clock()
        if now >= self._next_sweep:
            self.expire(now)

    def expire(self, now: float | None = None) -> int:
        """Forget the rate (and so the metric series) of every client id idle for more than ``expire_s`` whose last
        throttle delay is over; how many were forgotten."""
        if now is None:
            now = self.clock()
        self._next_sweep = now + self.sweep_every
        idle_since = now - self.expire_s
        gone = [k for k, st in self.stats.items() if st.last_used < idle_since and st.throttled_until <= now]
        for key in gone:
            del self.stats[key]
        return len(gone)
