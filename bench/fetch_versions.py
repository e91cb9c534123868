#!/usr/bin/env python3
"""Fetch v11 against the flexible versions (v12, v13+ by topic id, v17) on kafkalog's broker, side by side in one run.

    python bench/fetch_versions.py [--partitions 16] [--batches 50] [--loops 10] [--repeat 5]
                                   [--versions 11,12,13,17] [--kafkalog DIR] [--json FILE]

Two measurements of the broker's hot path, every version in the same run, rounds alternating between versions:

1. codec (in this process): ``_wire.encode_fetch_response`` of a response of P partitions, each one 64 KiB record
   slice (handed over, not copied), and ``_wire.parse_fetch`` of the matching request; microseconds per call, best
   of R runs of 20,000 calls.
2. wire: `kafkalog serve` holds P partitions of B batches of 1000 records of 100 B; a raw consumer (one connection,
   every request frame encoded before the clock starts, answers read whole and not decoded) reads the whole topic
   with requests of one batch per partition (its offsets known in advance), L times over per pass, a pass per version
   in turn; records/s (best of R passes) and the broker's CPU seconds per pass (its user + system time, psutil).

``--kafkalog DIR``: measure the kafkalog package found in DIR (a checkout with its extensions built, e.g. an older
commit: versions it does not serve are reported n/a) instead of this checkout's. Benchmarks are not tests: nothing
here fails on a number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--batches", type=int, default=50, help="batches of 1000 records per partition")
    ap.add_argument("--loops", type=int, default=10, help="reads of the whole topic per pass")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--versions", default="11,12,13,17")
    ap.add_argument("--kafkalog", default=str(ROOT), help="directory holding the kafkalog package to measure")
    ap.add_argument("--json", default=None)
    return ap.parse_args()


ARGS = _args()
sys.path.insert(0, ARGS.kafkalog)

import psutil  # noqa: E402

from kafkalog._engine.batch import build_batch  # noqa: E402
from kafkalog.broker import _wire, protocol  # noqa: E402

TOPIC = "fetch-versions"
RECORDS_PER_BATCH = 1000
VALUE = b"v" * 92  # + an 8-byte key: 100 B per record


def supported(version: int) -> bool:
    lo, hi = protocol.SUPPORTED[1]
    return lo <= version <= hi


def request_body(version: int, parts, topic_id) -> dict:
    """parts: [(partition, offset, max bytes)]; only the fields the version has (an older codec refuses others)."""
    topic = {"topic_id": topic_id} if version >= 13 else {"topic": TOPIC}
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{**topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": off, "log_start_offset": -1,
                 "partition_max_bytes": mb} for p, off, mb in parts]}],
            "forgotten_topics_data": [], "rack_id": ""}


def best_us(fn, calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def codec(versions, partitions: int, repeat: int) -> dict:
    tid = uuid.uuid4()
    data = memoryview(bytes(64 << 10))
    out = {}
    for v in versions:
        if not supported(v):
            out[v] = None
            continue
        topics = [(tid if v >= 13 else TOPIC, [(p, 0, 1000, 1000, 0, data) for p in range(partitions)])]
        frame = protocol.encode_request(1, v, 1, "bench", request_body(
            v, [(p, 1000 * p, 1 << 20) for p in range(partitions)], tid))[4:]
        _, offset = protocol.read_request_header(frame)
        out[v] = {"encode_us": best_us(lambda v=v, t=topics: _wire.encode_fetch_response(v, 1, 0, 0, 0, t), 20000,
                                       repeat),
                  "parse_us": best_us(lambda v=v, f=frame, o=offset: _wire.parse_fetch(f, o, v), 20000, repeat)}
    return out


class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def call(self, key, version, body) -> dict:
        self.corr += 1
        self.sock.sendall(protocol.encode_request(key, version, self.corr, "bench", body))
        return protocol.decode_response(key, version, self.frame())[1]

    def frame(self) -> bytes:
        head = self._read(4)
        return self._read(struct.unpack(">i", head)[0])

    def _read(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionError("the broker closed the connection")
            got += k
        return buf


def start_broker(scratch: str):
    """`python -m kafkalog serve` from a copy of the package measured (a rebuild meanwhile cannot touch it)."""
    import subprocess
    snap = os.path.join(scratch, "snapshot")
    shutil.copytree(os.path.join(ARGS.kafkalog, "kafkalog"), os.path.join(snap, "kafkalog"),
                    ignore=shutil.ignore_patterns("*.c", "*.html", "__pycache__", "*.o"))
    env = dict(os.environ, PYTHONPATH=snap, PYTHONSAFEPATH="1")
    proc = subprocess.Popen([sys.executable, "-m", "kafkalog", "serve", "--data-dir", os.path.join(scratch, "data"),
                             "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            cwd=scratch)
    line = proc.stdout.readline().decode().strip()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"kafkalog serve did not start: {line!r}")
    return proc, int(line.rsplit(":", 1)[1])


def wire(versions, partitions: int, batches: int, repeat: int, loops: int) -> dict:
    scratch = tempfile.mkdtemp(prefix="kafkalog-fetch-versions-")
    proc, port = start_broker(scratch)
    try:
        c = Conn(port)
        created = c.call(19, 4, {"topics": [{"name": TOPIC, "num_partitions": partitions, "replication_factor": 1,
                                             "assignments": [], "configs": []}], "timeout_ms": 5000,
                                 "validate_only": False})
        assert created["topics"][0]["error_code"] == 0, created
        now = int(time.time() * 1000)
        batch = bytes(build_batch([VALUE] * RECORDS_PER_BATCH, keys=[b"%08d" % i for i in range(RECORDS_PER_BATCH)],
                                  timestamps=[now] * RECORDS_PER_BATCH))
        for p in range(partitions):
            for _ in range(batches):
                r = c.call(0, 7, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                    {"name": TOPIC, "partition_data": [{"index": p, "records": batch}]}]})
                assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
        md = c.call(3, 12, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
                            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}) \
            if protocol.SUPPORTED[3][1] >= 12 else {"topics": [{"topic_id": uuid.UUID(int=0)}]}
        tid = md["topics"][0]["topic_id"]
        # one batch per partition per request: offsets known in advance, every frame encoded before timing
        frames = {}
        for v in versions:
            if supported(v):
                frames[v] = [protocol.encode_request(1, v, i + 1, "bench", request_body(
                    v, [(p, i * RECORDS_PER_BATCH, len(batch) + 64) for p in range(partitions)], tid))
                    for i in range(batches)]
        first = c.call(1, max(frames), request_body(max(frames), [(0, 0, len(batch) + 64)], tid))
        assert first["responses"][0]["partitions"][0]["error_code"] == 0, first
        broker = psutil.Process(proc.pid)
        runs = {v: [] for v in frames}
        total = partitions * batches * RECORDS_PER_BATCH * loops
        for _ in range(repeat):
            for v, reqs in frames.items():
                cpu0 = sum(broker.cpu_times()[:2])
                t = time.perf_counter()
                got = 0
                for _ in range(loops):
                    for req in reqs:
                        c.sock.sendall(req)
                        got += len(c.frame())
                wall = time.perf_counter() - t
                cpu = sum(broker.cpu_times()[:2]) - cpu0
                assert got > total * 100, f"v{v}: {got} bytes read for {total} records"
                runs[v].append({"records_per_s": total / wall, "broker_cpu_s": cpu, "bytes": got})
        c.sock.close()
        return {v: {"best_records_per_s": max(r["records_per_s"] for r in rs),
                    "median_broker_cpu_s": sorted(r["broker_cpu_s"] for r in rs)[len(rs) // 2],
                    "response_bytes": rs[0]["bytes"], "runs": rs} if rs else None
                for v, rs in runs.items()} | {v: None for v in versions if v not in frames}
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    versions = [int(v) for v in ARGS.versions.split(",")]
    print(f"kafkalog from {ARGS.kafkalog}; Fetch versions served {protocol.SUPPORTED[1]}; load {os.getloadavg()}")
    c = codec(versions, ARGS.partitions, ARGS.repeat)
    w = wire(versions, ARGS.partitions, ARGS.batches, ARGS.repeat, ARGS.loops)
    total = ARGS.partitions * ARGS.batches * RECORDS_PER_BATCH * ARGS.loops
    print(f"\ncodec: {ARGS.partitions} partitions x 64 KiB, us/call (best of {ARGS.repeat} x 20,000)")
    print(f"wire: {total:,} records of 100 B in {ARGS.batches * ARGS.loops} requests of {ARGS.partitions} batches, "
          f"best of {ARGS.repeat} passes (broker CPU: median)")
    print(f"{'version':>8} {'encode us':>10} {'parse us':>9} {'records/s':>12} {'broker CPU s':>13} {'bytes':>12}")
    for v in versions:
        cv, wv = c.get(v), w.get(v)
        if cv is None or wv is None:
            print(f"{'v%d' % v:>8} {'n/a (not served)':>30}")
            continue
        print(f"{'v%d' % v:>8} {cv['encode_us']:>10.2f} {cv['parse_us']:>9.2f} {wv['best_records_per_s']:>12,.0f} "
              f"{wv['median_broker_cpu_s']:>13.3f} {wv['response_bytes']:>12,}")
    print(f"load at the end {os.getloadavg()}")
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps({"codec": c, "wire": w, "args": vars(ARGS)}, indent=1, default=str))


if __name__ == "__main__":
    main()
