"""KIP-227: bytes on the wire per idle fetch round, sessionless vs incremental fetch sessions, side by side.

    python bench/fetch_sessions.py [--partitions 1000] [--rounds 30]

A kafka-python consumer (the one real client that uses fetch sessions) is assigned every partition of a topic
with one record each and reads them all; then it polls ROUNDS times with nothing new. The broker's own counters
(the Prometheus metrics of the kafkalog broker: request frames in, response frames out, Fetch requests) give the
bytes per idle fetch round for each mode, in the same run and on the same broker. The seed's claim: sessionless
rounds cost O(partitions), incremental ones O(changes) — here O(1), since nothing changes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from kafkalog._engine.batch import build_batch  # noqa: E402
from kafkalog.broker import Broker  # noqa: E402


def _counter(registry, name, labels=None):
    v = registry.get_sample_value(name, labels or {})
    return v or 0.0


def measure(broker: Broker, topic: str, partitions: int, rounds: int, incremental: bool) -> dict:
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                      enable_incremental_fetch_sessions=incremental, fetch_max_wait_ms=50,
                      client_id=f"bench-{'incremental' if incremental else 'sessionless'}")
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        deadline = time.monotonic() + 120
        while got < partitions and time.monotonic() < deadline:
            got += sum(len(v) for v in c.poll(timeout_ms=200).values())
        if got < partitions:
            raise SystemExit(f"only {got} of {partitions} records arrived")
        for _ in range(3):  # settle: the client's first incremental round lists the partitions it moved
            c.poll(timeout_ms=100)
        reg = broker.metrics.registry
        f0 = _counter(reg, "kafkalog_requests_total", {"api": "Fetch"})
        in0 = _counter(reg, "kafkalog_network_bytes_in_total")
        out0 = _counter(reg, "kafkalog_network_bytes_out_total")
        for _ in range(rounds):
            c.poll(timeout_ms=100)
        fetches = _counter(reg, "kafkalog_requests_total", {"api": "Fetch"}) - f0
        bytes_in = _counter(reg, "kafkalog_network_bytes_in_total") - in0
        bytes_out = _counter(reg, "kafkalog_network_bytes_out_total") - out0
    finally:
        c.close()
    # other requests (metadata refreshes) are rare over a few seconds; all bytes are charged to the fetches
    return {"fetches": int(fetches), "request_bytes": bytes_in / max(fetches, 1),
            "response_bytes": bytes_out / max(fetches, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        with Broker(Path(d) / "data", listen="127.0.0.1:0", metrics="127.0.0.1:0") as b:
            store = b.store
            store.create_topic("idle", args.partitions)
            for p in range(args.partitions):
                store.log("idle", p).append_records(bytearray(build_batch([b"x" * 100])))
            rows = {mode: measure(b, "idle", args.partitions, args.rounds, mode == "incremental")
                    for mode in ("sessionless", "incremental")}
    print(f"idle fetch rounds, {args.partitions} partitions, kafka-python consumer, {args.rounds} rounds each")
    print(f"{'mode':<13}{'fetches':>9}{'request B':>12}{'response B':>12}{'total B/round':>15}")
    for mode, r in rows.items():
        total = r["request_bytes"] + r["response_bytes"]
        print(f"{mode:<13}{r['fetches']:>9}{r['request_bytes']:>12.0f}{r['response_bytes']:>12.0f}{total:>15.0f}")
    full = sum(v for k, v in rows["sessionless"].items() if k != "fetches")
    inc = sum(v for k, v in rows["incremental"].items() if k != "fetches")
    print(f"ratio sessionless / incremental bytes per idle round: {full / max(inc, 1):.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
