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

Quotas can be changed while running (AlterClientQuotas, ``kafkalog quotas``); changes are kept in
``.kafkalog-broker/quotas.json`` and survive restarts. Loop thread only.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from ..errors import InvalidConfigError, InvalidRequestError
from ..storage.files import atomic_write

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
KINDS = (PRODUCE, FETCH)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


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

    __slots__ = ("rate", "throttle_total_ms", "throttled_requests", "requests", "last_throttle_ms", "last_used")

    def __init__(self, rate: Rate, now: float):
        self.rate = rate
        self.throttle_total_ms = 0
        self.throttled_requests = 0
        self.requests = 0
        self.last_throttle_ms = 0
        self.last_used = now


class ClientQuotas:
    """The broker's quota manager. ``clock`` returns seconds (injectable for tests)."""

    EXPIRE_S = 3600.0  # Kafka drops a client's sensors after an hour without use

    def __init__(self, config, state_path: Path | None = None, clock=time.monotonic):
        self.clock = clock
        self.samples = config["quota.window.num"]
        self.window_s = float(config["quota.window.size.seconds"])
        self.defaults: dict[str, float | None] = {
            PRODUCE: parse_rate(config["quota.producer.default"], "quota.producer.default")
            if config["quota.producer.default"] else None,
            FETCH: parse_rate(config["quota.consumer.default"], "quota.consumer.default")
            if config["quota.consumer.default"] else None}
        self.overrides: dict[str, dict[str, float]] = {
            PRODUCE: parse_overrides(config["quota.producer.override"], "quota.producer.override"),
            FETCH: parse_overrides(config["quota.consumer.override"], "quota.consumer.override")}
        self.state_path = state_path
        self.stats: dict[tuple[str, str], ClientStats] = {}
        self._load()

    # -- configuration --------------------------------------------------------------------------------------------

    def _load(self) -> None:
        if self.state_path is None:
            return
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return
        for kind in KINDS:
            d = data.get(kind, {})
            if "default" in d:
                self.defaults[kind] = d["default"]
            for cid, v in d.get("clients", {}).items():
                if v is None:
                    self.overrides[kind].pop(cid, None)
                else:
                    self.overrides[kind][cid] = float(v)

    def _save(self) -> None:
        if self.state_path is None:
            return
        data = {kind: {"default": self.defaults[kind], "clients": self.overrides[kind]} for kind in KINDS}
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.state_path, json.dumps(data, indent=1, sort_keys=True).encode())

    @property
    def enabled(self) -> bool:
        return any(self.defaults.values()) or any(self.overrides.values())

    def quota(self, kind: str, client_id: str | None) -> float | None:
        cid = client_id or ""
        o = self.overrides[kind].get(cid)
        return o if o is not None else self.defaults[kind]

    def set_quota(self, kind: str, client_id: str | None, rate: float | None) -> None:
        """``client_id`` None = the default for every client; ``rate`` None removes the quota (or override)."""
        if kind not in KINDS:
            raise InvalidRequestError(f"unknown quota key {kind!r} (known: {', '.join(KINDS)})")
        if rate is not None and not rate > 0:
            raise InvalidRequestError(f"{kind}={rate}: must be a positive rate")
        if client_id is None:
            self.defaults[kind] = rate
        elif rate is None:
            self.overrides[kind].pop(client_id, None)
        else:
            self.overrides[kind][client_id] = float(rate)
        self._save()

    def describe(self) -> list[tuple[str | None, str, float]]:
        """(client id or None for the default, kind, rate) of every quota set."""
        out: list[tuple[str | None, str, float]] = []
        for kind in KINDS:
            if self.defaults[kind]:
                out.append((None, kind, self.defaults[kind]))
            out.extend((cid, kind, v) for cid, v in sorted(self.overrides[kind].items()))
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
        return ms

    def byte_rate(self, kind: str, client_id: str | None) -> float:
        st = self.stats.get((kind, client_id or ""))
        return st.rate.measure(self.clock()) if st is not None else 0.0

    def expire(self) -> None:
        now = self.clock()
        for key in [k for k, st in self.stats.items() if now - st.last_used > self.EXPIRE_S]:
            del self.stats[key]
