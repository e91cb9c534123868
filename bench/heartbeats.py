"""Heartbeat cost at 1,000 members: kafkalog serve beside Apache Kafka 4.4, broker CPU per heartbeat (issue 24).

    python bench/heartbeats.py [--members 1000] [--partitions 64] [--rounds 5] [--connections 50]

Per broker (each alone on the machine, started fresh) and per group protocol:

- ``kip848``: MEMBERS members of one consumer group (KIP-848, ConsumerGroupHeartbeat v1, the broker's default
  assignor) join, take their assignments and acknowledge them until the group is stable (every member at the group
  epoch, owning what it was given); then ROUNDS heartbeats per member (the steady state: group, member id and epoch
  only, as the Java consumer sends between changes);
- ``classic``: MEMBERS members join one classic group (JoinGroup v9 with the member-id round of KIP-394, the leader
  assigns with range in SyncGroup v5), then ROUNDS Heartbeat v4 per member.

The members are raw wire clients of this process (asyncio; CONNECTIONS sockets shared by the KIP-848 members with
requests pipelined, one socket a member for classic, whose JoinGroup waits for the whole group), so no client library
adds its own work. Measured: the broker process's CPU time (user + system) over the steady-state heartbeats, divided
by their count (µs per heartbeat), and the wall time of those rounds. Ratio = kafkalog / Kafka (goal ≤ 1).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers.procs import each_broker  # noqa: E402
from harness import progress, snapshot_kafkalog  # noqa: E402

HB848, JOIN, SYNC, HB, CREATE, FIND = 68, 11, 14, 12, 19, 10
RETRY = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: ask again
JOIN_TIMEOUT_S = 300.0  # failure guards only: a group that never settles is reported, not timed


class Conn:
    """One socket, requests pipelined: responses come back in order (Kafka answers a connection's requests in
    order), each matched to its future by correlation id."""

    def __init__(self, reader, writer, protocol):
        self.r, self.w, self.p = reader, writer, protocol
        self.corr = 0
        self.waiting: dict[int, tuple[int, int, asyncio.Future]] = {}
        self.task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, port: int, protocol):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w, protocol)

    async def _read(self):
        while True:
            head = await self.r.readexactly(4)
            frame = await self.r.readexactly(struct.unpack(">i", head)[0])
            corr = struct.unpack_from(">i", frame, 0)[0]
            key, version, fut = self.waiting.pop(corr)
            fut.set_result(self.p.decode_response(key, version, frame)[1])

    def call(self, key: int, version: int, body: dict) -> asyncio.Future:
        self.corr += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiting[self.corr] = (key, version, fut)
        self.w.write(self.p.encode_request(key, version, self.corr, "bench-hb", body))
        return fut

    def close(self):
        self.task.cancel()
        self.w.close()


def _member_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


async def create_topic(port: int, protocol, topic: str, partitions: int) -> None:
    c = await Conn.open(port, protocol)
    r = await c.call(CREATE, 5, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                             "assignments": [], "configs": []}], "timeout_ms": 30000,
                                 "validate_only": False})
    err = r["topics"][0]["error_code"]
    c.close()
    if err not in (0, 36):
        raise RuntimeError(f"CreateTopics: error {err}")


async def coordinator_ready(conn: Conn, group: str) -> None:
    """FindCoordinator until the group's coordinator answers (Kafka creates __consumer_offsets on the first ask)."""
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        r = await conn.call(FIND, 4, {"key_type": 0, "coordinator_keys": [group]})
        if r["coordinators"][0]["error_code"] == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"FindCoordinator: error {r['coordinators'][0]['error_code']}")
        await asyncio.sleep(0.2)


async def kip848(port: int, protocol, topic: str, members: int, rounds: int, nconn: int, cpu) -> dict:
    conns = [await Conn.open(port, protocol) for _ in range(nconn)]
    group = f"hb-{uuid.uuid4().hex[:8]}"
    await coordinator_ready(conns[0], group)
    ids = [_member_id() for _ in range(members)]
    epoch = [0] * members
    owned: list[list | None] = [[] for _ in range(members)]
    acked = [False] * members

    def beat(i, full: bool):
        body = {"group_id": group, "member_id": ids[i], "member_epoch": epoch[i], "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": 30000 if full else -1,
                "subscribed_topic_names": [topic] if full else None, "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": owned[i] if (full or not acked[i]) else None}
        return conns[i % nconn].call(HB848, 1, body)

    deadline = time.monotonic() + JOIN_TIMEOUT_S
    full = True
    joins = 0
    t0, cpu0 = time.perf_counter(), cpu()
    while True:
        answers = await asyncio.gather(*(beat(i, full or epoch[i] == 0) for i in range(members)))
        joins += 1
        full = False
        group_epochs = set()
        settled = True
        for i, a in enumerate(answers):
            if a["error_code"] in RETRY:
                settled = False
                continue
            if a["error_code"]:
                raise RuntimeError(f"ConsumerGroupHeartbeat: error {a['error_code']} {a.get('error_message')}")
            epoch[i] = a["member_epoch"]
            group_epochs.add(a["member_epoch"])
            if a["assignment"] is not None:
                owned[i] = [{"topic_id": tp["topic_id"], "partitions": tp["partitions"]}
                            for tp in a["assignment"]["topic_partitions"]]
                acked[i] = False  # the next heartbeat says what it owns now
                settled = False
            elif not acked[i]:
                acked[i] = True
                settled = False
        if settled and len(group_epochs) == 1:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"KIP-848 group of {members} did not settle in {JOIN_TIMEOUT_S} s")
        await asyncio.sleep(0.05)
    form_s, form_cpu = time.perf_counter() - t0, cpu() - cpu0
    assigned = sum(len(tp["partitions"]) for o in owned for tp in (o or []))
    return dict(await steady(lambda i: beat(i, False), members, rounds, cpu, conns), join_rounds=joins,
                assigned=assigned, form_s=form_s, form_cpu_s=form_cpu, generation=max(epoch))


async def steady(beat, members: int, rounds: int, cpu, conns) -> dict:
    """ROUNDS heartbeats of every member (``beat(i)``), all answered without error: broker CPU per heartbeat and the
    wall time; the connections are closed after."""
    cpu0, t0 = cpu(), time.perf_counter()
    for _ in range(rounds):
        answers = await asyncio.gather(*(beat(i) for i in range(members)))
        bad = [a["error_code"] for a in answers if a["error_code"]]
        if bad:
            raise RuntimeError(f"steady heartbeat: errors {sorted(set(bad))}")
    wall, used = time.perf_counter() - t0, cpu() - cpu0
    for c in conns:
        c.close()
    return {"us_per_hb": used / (rounds * members) * 1e6, "wall_s": wall}


def _range_assign(members: list[str], topic: str, partitions: int) -> list[dict]:
    per, extra = divmod(partitions, len(members))
    out, start = [], 0
    for k, m in enumerate(sorted(members)):
        n = per + (1 if k < extra else 0)
        data = protocol_assignment(topic, list(range(start, start + n)))
        out.append({"member_id": m, "assignment": data})
        start += n
    return out


def protocol_assignment(topic: str, parts: list[int]) -> bytes:
    # ConsumerProtocolAssignment v0: version, [topic, [partition]], user data (null)
    b = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
    b += struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    return b + struct.pack(">i", -1)


def protocol_subscription(topic: str) -> bytes:
    # ConsumerProtocolSubscription v0: version, [topic], user data (null)
    return struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", -1)


async def classic(port: int, protocol, topic: str, partitions: int, members: int, rounds: int, cpu,
                  assignor: str = "range") -> dict:
    conns = [await Conn.open(port, protocol) for _ in range(members)]
    group = f"hbc-{uuid.uuid4().hex[:8]}"
    await coordinator_ready(conns[0], group)
    meta = protocol_subscription(topic)
    ids = [""] * members
    gens = [-1] * members
    joins = [0]

    async def member(i):
        """Join and sync as a client does: rejoin on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION, start over on
        UNKNOWN_MEMBER_ID, ask again while the coordinator loads (a group of 1,000 forms over several generations
        as members keep arriving)."""
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while time.monotonic() < deadline:
            joins[0] += 1
            j = await conns[i].call(JOIN, 9, {
                "group_id": group, "session_timeout_ms": 45000, "rebalance_timeout_ms": 60000,
                "member_id": ids[i], "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": assignor, "metadata": meta}], "reason": None})
            err = j["error_code"]
            if err == 79:  # KIP-394: join again with the id given
                ids[i] = j["member_id"]
                continue
            if err == 25:
                ids[i] = ""
                continue
            if err in RETRY or err == 27:
                await asyncio.sleep(0.1)
                continue
            if err:
                raise RuntimeError(f"JoinGroup: error {err}")
            ids[i], gen = j["member_id"], j["generation_id"]
            plan = _range_assign([m["member_id"] for m in j["members"]], topic, partitions) \
                if j["leader"] == ids[i] else []
            sy = await conns[i].call(SYNC, 5, {"group_id": group, "generation_id": gen, "member_id": ids[i],
                                              "group_instance_id": None, "protocol_type": "consumer",
                                              "protocol_name": assignor, "assignments": plan})
            err = sy["error_code"]
            if err in (27, 22) or err in RETRY:
                continue
            if err == 25:
                ids[i] = ""
                continue
            if err:
                raise RuntimeError(f"SyncGroup: error {err}")
            gens[i] = gen
            return
        raise RuntimeError(f"classic group of {members} did not form in {JOIN_TIMEOUT_S} s")

    def beat(i):
        return conns[i].call(HB, 4, {"group_id": group, "generation_id": gens[i], "member_id": ids[i],
                                     "group_instance_id": None})

    deadline = time.monotonic() + JOIN_TIMEOUT_S
    pending = list(range(members))
    t0, cpu0 = time.perf_counter(), cpu()
    while pending:  # until one heartbeat round finds every member in the group's generation
        await asyncio.gather(*(member(i) for i in pending))
        answers = await asyncio.gather(*(beat(i) for i in range(members)))
        pending = [i for i, a in enumerate(answers) if a["error_code"]]
        if time.monotonic() > deadline:
            raise RuntimeError(f"classic group of {members} never stable in {JOIN_TIMEOUT_S} s")
    form_s, form_cpu = time.perf_counter() - t0, cpu() - cpu0
    return dict(await steady(beat, members, rounds, cpu, conns), join_rounds=joins[0], assigned=partitions,
                form_s=form_s, form_cpu_s=form_cpu, generation=max(gens))


def measure(broker, args, protocol) -> dict:
    topic = f"hb-{uuid.uuid4().hex[:6]}"
    res = {}

    async def run():
        await create_topic(broker.port, protocol, topic, args.partitions)
        if "kip848" in args.protocols:
            progress(f"{broker.name}: kip848, {args.members} members")
            res["kip848"] = await kip848(broker.port, protocol, topic, args.members, args.rounds, args.connections,
                                         broker.cpu)
        if "classic" in args.protocols:
            progress(f"{broker.name}: classic, {args.members} members")
            res["classic"] = await classic(broker.port, protocol, topic, args.partitions, args.members, args.rounds,
                                           broker.cpu, args.classic_assignor)

    try:
        asyncio.run(run())
    except RuntimeError as e:
        res["error"] = e
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--protocols", default="kip848,classic", help="a comma-separated subset of kip848, classic")
    ap.add_argument("--brokers", default="kafka,kafkalog", help="a comma-separated subset of kafka, kafkalog")
    ap.add_argument("--classic-assignor", default="range",
                    help="the protocol name the classic members offer (the leader assigns ranges under it): range is "
                         "run by kafkalog's group model, another name (cooperative-sticky) by its classic coordinator")
    args = ap.parse_args(argv)
    args.protocols = [p for p in args.protocols.split(",") if p]
    if set(args.protocols) - {"kip848", "classic"}:
        ap.error(f"unknown protocols {sorted(set(args.protocols) - {'kip848', 'classic'})}")
    brokers = tuple(b for b in args.brokers.split(",") if b)
    if set(brokers) - {"kafka", "kafkalog"}:
        ap.error(f"unknown brokers {sorted(set(brokers) - {'kafka', 'kafkalog'})}")
    results, notes = {}, []
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-heartbeats-") as scratch:
        snapshot = snapshot_kafkalog(str(Path(scratch) / "snapshot"))
        sys.path.insert(0, snapshot)
        from kafkalog.broker import protocol
        for name, broker in each_broker(scratch, snapshot, notes, brokers):
            results[name] = measure(broker, args, protocol)
            if "error" in results[name]:
                notes.append(broker.failure(f"{name} heartbeats", results[name].pop("error")))
    print(f"\n{args.members} members, {args.partitions} partitions, {args.rounds} steady heartbeats a member "
          f"(broker CPU µs per heartbeat; ratio = kafkalog / Kafka, goal <= 1)")
    print(f"{'protocol':<9} {'kafka':>10} {'kafkalog':>10} {'ratio':>7}   wall s (kafka / kafkalog), join rounds")
    for proto in args.protocols:
        k = results.get("kafka", {}).get(proto)
        m = results.get("kafkalog", {}).get(proto)
        ratio = f"{m['us_per_hb'] / k['us_per_hb']:.2f}x" if k and m and k["us_per_hb"] else "-"
        ks = f"{k['us_per_hb']:.1f}" if k else "-"
        ms = f"{m['us_per_hb']:.1f}" if m else "-"
        walls = f"{k['wall_s'] if k else float('nan'):.2f} / {m['wall_s'] if m else float('nan'):.2f}"
        rounds = f"{k['join_rounds'] if k else '-'} / {m['join_rounds'] if m else '-'}"
        print(f"{proto:<9} {ks:>10} {ms:>10} {ratio:>7}   {walls}, {rounds}")
    print("\nformation: seconds from the first join until every member holds the final generation (broker CPU s; "
          "the generation or epoch reached)")
    print(f"{'protocol':<9} {'kafka':>18} {'kafkalog':>18} {'ratio':>7}")
    for proto in args.protocols:
        k = results.get("kafka", {}).get(proto)
        m = results.get("kafkalog", {}).get(proto)
        ratio = f"{m['form_s'] / k['form_s']:.2f}x" if k and m and k["form_s"] else "-"

        def cell(r):
            return f"{r['form_s']:.2f} ({r['form_cpu_s']:.2f}, g{r['generation']})" if r else "-"
        print(f"{proto:<9} {cell(k):>18} {cell(m):>18} {ratio:>7}")
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
