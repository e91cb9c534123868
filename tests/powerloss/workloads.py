"""Workloads for the power-loss tests, each run in its own process on the plfs mount until it is killed.

    python workloads.py NAME DATA_DIR ACK_FILE SEED [WRITER_ID]

A workload writes one line to ACK_FILE (on the real disk, outside the mount; appended and fsynced) only after a call
that promised durability returned. The lines are what the checker holds the recovered store to:

    R <topic> <partition> <offset> <sha1 of value>   a record that flush()/acks="all"/put() made durable
    D <topic> <partition> <offset>                    delete_records_before / retention advanced the log start here
    C <group> <topic> <partition> <offset>            commit() returned with this committed offset
    T <topic> created | deleting | deleted            create_topic returned / delete_topic called, returned
    K <topic> <partition> <offset> <key> <sha1|->     a keyed record of a compacted topic made durable by flush()
                                                      ("-": a tombstone); the cleaner may remove it once a later
                                                      record of its key exists, so it is not an R line
    G <topic> <partition> <base> <end> <mapped end>   run_cleaner returned, having swapped in the cleaned group of
                                                      offsets [base, end) under a round whose offset map ended at
                                                      <mapped end>: no record there has a later one of its key below

The transactional workload (w_txn) writes its own lines, each naming its transaction (unique per run):

    XR <txn> <topic> <partition> <offset> <sha1>      a record of the transaction, appended and flushed
    XO <txn> <group> <topic> <partition> <offset>     TxnOffsetCommit (flushed) of the group, in the transaction
    XE <txn> commit | abort                           end_txn is being called (it may not return)
    XD <txn> commit | abort                           end_txn returned
    XS <topic> <partition> <lso>                      the last stable offset right after an end_txn returned

The static group member (w_static_group, against the broker workload) writes:

    S <group> <generation>                            a SyncGroup was answered for this generation (acknowledged)
    C <group> <topic> <partition> <offset>            an OffsetCommit of the member was answered without error

The KIP-848 member (w_kip848_group, against the broker workload) writes:

    K <group> <epoch>                                 a ConsumerGroupHeartbeat was answered with this member epoch

The share-group member (w_share_member, against the broker workload) writes R lines for its records and:

    A <topic> <partition> <offset>                    an ACCEPT or REJECT of the offset was answered without error:
                                                      the share-partition state must hold it as done for good
"""

from __future__ import annotations

import hashlib
import os
import queue
import random
import sys
import time

import kafkalog
from kafkalog import TopicPartition
from kafkalog._engine.batch import build_batch
from kafkalog.errors import ConcurrentTransactionsError
from kafkalog.storage import failpoints

SMALL = {"segment.bytes": 16384, "index.interval.bytes": 512}


class Acks:
    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, *lines: str) -> None:
        os.write(self.fd, "".join(line + "\n" for line in lines).encode())
        os.fsync(self.fd)


def digest(value: bytes) -> str:
    return hashlib.sha1(value).hexdigest()


def values(rng: random.Random, tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}-".encode() + rng.randbytes(rng.randint(10, 400)) for i in range(n)]


def ensure_topic(store, name, config=SMALL, partitions=1):
    if name not in store.topics():
        try:
            store.create_topic(name, partitions, config)
        except kafkalog.errors.TopicAlreadyExistsError:
            pass


def appender(store, acks, rng, tag, deletes=True, flushes=0.7, topic="t", config=SMALL):
    ensure_topic(store, topic, config)
    log = store.log(topic, 0)
    seq = 0
    while True:
        vals = values(rng, f"{tag}.{seq}", rng.randint(1, 40))
        seq += 1
        base = log.append_batch(vals, compression=rng.choice([None, None, "lz4", "zstd"]))
        if rng.random() < flushes:
            log.flush()
            acks.write(*(f"R {topic} 0 {base + i} {digest(v)}" for i, v in enumerate(vals)))
        if deletes and rng.random() < 0.05:
            end = log.log_end_offset
            target = rng.randint(log.log_start_offset, max(log.log_start_offset, end - 50))
            acks.write(f"D {topic} 0 {log.delete_records_before(target)}")
        if rng.random() < 0.03:
            log.roll()


def w_exclusive(data, acks, rng, wid):
    with kafkalog.LogStore(data, exclusive=True, maintenance=False) as store:
        appender(store, acks, rng, f"x{wid}")


def w_shared(data, acks, rng, wid):
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}) as store:
        # writer 2 never flushes: it rolls segments whose directory entries only the others' flushes make durable
        appender(store, acks, rng, f"s{wid}", deletes=wid == 0, flushes=0.0 if wid == 2 else 0.7)


def w_prealloc(data, acks, rng, wid):
    """Shared writers on a ``preallocate`` topic: each append overwrites zero-written room past the last batch, whose
    size change an earlier fdatasync made durable (or not: the room a power loss cut off was never a promise)."""
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}) as store:
        appender(store, acks, rng, f"pa{wid}", deletes=wid == 0, flushes=0.0 if wid == 2 else 0.7, topic="pa",
                 config=dict(SMALL, preallocate=True))


# removed segments go at once: on plfs every directory fsync writes the whole table, and the swaps fsync it often
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 4096, "index.interval.bytes": 256,
             "file.delete.delay.ms": 0}


def w_compact(data, acks, rng, wid):
    """Keyed records (a few hot keys, some tombstones, and cold keys whose latest records sit in old, cleaned
    segments) on a compacted topic, flushed and cleaned (force) often, from the start, beside the other compact
    workloads (shared mode: one of them cleans at a time)."""
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}, maintenance=False) as store:
        ensure_topic(store, "ct", COMPACTED)
        log = store.log("ct", 0)
        seq = 0
        while True:
            n = rng.randint(1, 12)
            keys = [b"h%d" % rng.randrange(8) if rng.random() < 0.7 else b"c%02d" % rng.randrange(60)
                    for _ in range(n)]
            vals = [None if rng.random() < 0.06 else
                    f"ct{wid}.{seq}.{i}-".encode() + rng.randbytes(rng.randint(10, 150)) for i in range(n)]
            seq += 1
            base = log.append_batch(vals, keys=keys, compression=rng.choice([None, None, "lz4"]))
            if rng.random() < 0.6:
                log.flush()
                acks.write(*(f"K ct 0 {base + i} {k.decode()} {'-' if v is None else digest(v)}"
                             for i, (k, v) in enumerate(zip(keys, vals))))
            if seq == 1 or rng.random() < 0.25:
                if rng.random() < 0.5:
                    log.roll()
                stats = log.run_cleaner(force=True)
                if stats is not None and stats.swaps:
                    acks.write(*(f"G ct 0 {b} {e} {stats.end_offset}" for b, e, _ in stats.swaps))
            # at a pace the cleaner keeps up with on plfs (its rounds fsync files and the directory many times)
            time.sleep(rng.uniform(0, 0.01))


def w_retention(data, acks, rng, wid):
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}, maintenance=False) as store:
        ensure_topic(store, "t")
        log = store.log("t", 0)
        store.alter_topic_config("t", dict(SMALL, **{"retention.bytes": 60000}))
        log = store.log("t", 0)
        while True:
            time.sleep(rng.uniform(0.05, 0.3))
            if log.run_retention():
                acks.write(f"D t 0 {log.log_start_offset}")


def w_producer(data, acks, rng, wid):
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}) as store:
        ensure_topic(store, "p", partitions=2)
        producer = kafkalog.KafkaProducer(store, acks="all", linger_ms=rng.choice([0, 2]))
        while True:
            vals = values(rng, f"p{wid}", rng.randint(1, 20))
            futures = [(v, producer.send("p", v, key=v[:4])) for v in vals]
            lines = []
            for v, f in futures:
                md = f.get(timeout=30)
                lines.append(f"R p {md.partition} {md.offset} {digest(v)}")
            acks.write(*lines)


def w_consumer(data, acks, rng, wid):
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}) as store:
        ensure_topic(store, "c")
        log = store.log("c", 0)
        consumer = kafkalog.KafkaConsumer("c", store=store, group_id="g", enable_auto_commit=False,
                                          auto_offset_reset="earliest")
        while True:
            log.append_batch(values(rng, f"c{wid}", rng.randint(1, 30)))
            log.flush()  # consumed records are durable: a commit never points past what survives
            got = consumer.poll(timeout_ms=200, max_records=rng.randint(1, 50))
            if got:
                consumer.commit()
                tp = TopicPartition("c", 0)
                acks.write(f"C g c 0 {consumer.committed(tp)}")


def w_queue(data, acks, rng, wid):
    with kafkalog.DurableQueue(data, name="jobs", group="w") as q:
        while True:
            vals = values(rng, f"q{wid}", rng.randint(1, 20))
            offsets = q.put_many(vals)
            acks.write(*(f"R jobs 0 {o} {digest(v)}" for o, v in zip(offsets, vals)))
            try:
                q.ack(q.get(timeout=0.1))
            except queue.Empty:
                pass


def w_topics(data, acks, rng, wid):
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}, maintenance=False) as store:
        n, run = 0, rng.randrange(1 << 30)
        while True:
            name = f"tp{wid}r{run}x{n}"
            n += 1
            store.create_topic(name, 1, SMALL)
            acks.write(f"T {name} created")
            log = store.log(name, 0)
            vals = values(rng, name, rng.randint(1, 30))
            base = log.append_batch(vals)
            log.flush()
            acks.write(*(f"R {name} 0 {base + i} {digest(v)}" for i, v in enumerate(vals)))
            if rng.random() < 0.5:
                acks.write(f"T {name} deleting")
                store.delete_topic(name)
                acks.write(f"T {name} deleted")


TXN_TOPICS = {"xa": 2, "xb": 1}
TXN_PARTITIONS = [("xa", 0), ("xa", 1), ("xb", 0)]
TXN_OFFSETS_TP = TopicPartition("xa", 0)  # the partition whose consumed offset the transactions commit


def w_txn(data, acks, rng, wid):
    """Transactions through the data dir's coordinator (LogStore.transactions, as the broker runs them): two
    transactional ids per process, their transactions interleaved over 3 partitions of 2 topics, each a transactional
    batch or two per partition it holds (built as a producer builds them, appended with append_records and flushed,
    as acks=all does before the producer may end the transaction), half of them with a TxnOffsetCommit of the id's
    group; then commit (70 %) or abort. Opening the coordinator completes any PrepareX a power loss left; a new
    instance of an id fences (and aborts) what the last one left open. The second id of each process speaks
    transactions v2 (KIP-890 part 2: partitions and offsets added with client version 2, every end bumping the epoch,
    its markers carrying the bumped one, the producer going on with what EndTxn answered)."""
    config = {"lock.timeout.ms": 60000, "offsets.snapshot.interval.records": 20}
    # end_txn's steps take a little longer (after its PrepareX is durable, after each marker's append), so that a
    # power loss lands between them often (the "transactions-ending" case cuts right after an XE line)
    failpoints.enable("txn:after-prepare", lambda: time.sleep(rng.uniform(0, 0.03)))
    failpoints.enable("txn:after-marker", lambda: time.sleep(rng.uniform(0, 0.01)))
    with kafkalog.LogStore(data, config, maintenance=False) as store:
        for t, n in TXN_TOPICS.items():
            ensure_topic(store, t, partitions=n)
        coord = store.transactions
        ids = [f"w{wid}i{i}" for i in range(2)]
        tv = {ids[0]: 0, ids[1]: 2}
        producers = {}
        for tid in ids:
            for _ in range(10):
                try:
                    producers[tid] = coord.init_producer_id(tid, 600_000)
                    break
                except ConcurrentTransactionsError:  # it aborted the last instance's open transaction: retry
                    continue
        run, seq, offset_value = rng.randrange(1 << 30), 0, 0
        open_txns: dict[str, str] = {}
        while True:
            tid = rng.choice(ids)
            pid, epoch = producers[tid]
            name = open_txns.get(tid)
            if name is None:
                name = open_txns[tid] = f"{wid}.{run}.{seq}"
                seq += 1
                parts = rng.sample(TXN_PARTITIONS, rng.randint(1, len(TXN_PARTITIONS)))
                tps = [TopicPartition(t, p) for t, p in parts]
                if rng.random() < 0.5:  # the broker's form: a step of several adds (alone here), one append, one fsync
                    err, = coord.add_many([(tid, pid, epoch, tps, tv[tid])])
                    if err is not None:
                        raise err
                else:
                    coord.add_partitions(tid, pid, epoch, tps, tv[tid])
                for t, p in parts:
                    log = store.log(t, p)
                    for _ in range(rng.randint(1, 2)):
                        vals = values(rng, f"X{name}", rng.randint(1, 8))
                        now = int(time.time() * 1000)
                        batch = build_batch(vals, None, [now] * len(vals), producer_id=pid, producer_epoch=epoch,
                                            is_transactional=True, compression=rng.choice([0, 0, "lz4"]))
                        first, _ = log.append_records(batch)
                        log.flush()
                        acks.write(*(f"XR {name} {t} {p} {first + i} {digest(v)}" for i, v in enumerate(vals)))
                    if rng.random() < 0.05:
                        log.roll()
                if rng.random() < 0.5:
                    group = f"g-{tid}"
                    offset_value += 1 + rng.randrange(5)
                    coord.add_offsets(tid, pid, epoch, group, tv[tid])
                    store.offsets.commit_transactional(group, {TXN_OFFSETS_TP: run * 1000 + offset_value}, pid, epoch)
                    acks.write(f"XO {name} {group} {TXN_OFFSETS_TP.topic} {TXN_OFFSETS_TP.partition} "
                               f"{run * 1000 + offset_value}")
            elif rng.random() < 0.6:  # end it (or leave it open a while longer, other transactions meanwhile)
                del open_txns[tid]
                how = "commit" if rng.random() < 0.7 else "abort"
                acks.write(f"XE {name} {how}")
                if rng.random() < 0.5:  # the broker's form: a step of EndTxns (alone here)
                    got, = coord.end_many([(tid, pid, epoch, how == "commit", tv[tid])])
                    if isinstance(got, BaseException):
                        raise got
                    producers[tid] = got
                else:
                    producers[tid] = coord.end_txn(tid, pid, epoch, how == "commit", tv[tid])  # v2: the bumped epoch
                acks.write(f"XD {name} {how}",
                           *(f"XS {t} {p} {store.log(t, p).last_stable_offset}" for t, p in TXN_PARTITIONS))


def port_file(acks) -> str:
    """Where the broker workload tells the Kafka producers its port (outside the mount; removed each round)."""
    return acks.path + ".port"


def w_broker(data, acks, rng, wid):
    """``kafkalog serve`` on the mount: acks=all must mean fsynced before the answer (its group commit)."""
    from kafkalog.broker import Broker
    b = Broker(data, listen="127.0.0.1:0", config={
        "auto.create.topics.enable": True, "num.partitions": 2, "log.segment.bytes": 16384,
        "log.index.interval.bytes": 512, "group.initial.rebalance.delay.ms": 0})
    b.start()
    tmp = port_file(acks) + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(b.port))
    os.replace(tmp, port_file(acks))
    while True:
        time.sleep(1)


def w_kafka_producer(data, acks, rng, wid):
    """A Kafka client (librdkafka) producing with acks=all to the broker workload; a record is acknowledged when
    its delivery report says so."""
    import confluent_kafka
    while not os.path.exists(port_file(acks)):
        time.sleep(0.02)
    with open(port_file(acks)) as f:
        port = int(f.read())
    done = []

    def report(err, msg):
        if err is None:
            done.append(f"R k {msg.partition()} {msg.offset()} {digest(msg.value())}")
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "linger.ms": rng.choice([0, 1, 5]),
        "enable.idempotence": rng.random() < 0.5, "compression.type": rng.choice(["none", "lz4", "zstd"])})
    while True:
        for v in values(rng, f"k{wid}", rng.randint(1, 50)):
            producer.produce("k", v, key=v[:6], on_delivery=report)
        producer.flush(30)
        if done:
            lines, done[:] = list(done), []
            acks.write(*lines)


def w_static_group(data, acks, rng, wid):
    """A static member (group.instance.id) of a classic group on the broker workload, over the wire: it re-joins
    with its member id again and again (each time a new generation), syncs as the leader and commits at that
    generation; a generation is acknowledged once its SyncGroup was answered. After each power loss it comes back
    as a restarted static member (an empty member id), which the loaded group must take at its stored generation."""
    import socket
    import struct

    from kafkalog.broker import protocol
    while not os.path.exists(port_file(acks)):
        time.sleep(0.02)
    with open(port_file(acks)) as f:
        port = int(f.read())
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    corr = [0]

    def call(key, version, body):
        corr[0] += 1
        sock.sendall(protocol.encode_request(key, version, corr[0], "static-pl", body))
        (n,) = struct.unpack(">i", _read(sock, 4))
        return protocol.decode_response(key, version, _read(sock, n))[1]

    r = call(19, 5, {"topics": [{"name": "sg", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                 "configs": []}], "timeout_ms": 30000, "validate_only": False})
    assert r["topics"][0]["error_code"] in (0, 36), r
    meta = protocol.encode_subscription(["sg"])
    f = call(9, 7, {"group_id": "pl-static", "topics": None, "require_stable": False})
    # the committed offsets only grow, across power losses too (C lines): go on from the stored one
    offset = max([p["committed_offset"] for t in f["topics"] for p in t["partitions"]] + [0])
    member, last = "", -1
    while True:
        r = call(11, 9, {"group_id": "pl-static", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                         "member_id": member, "group_instance_id": "pl-1", "protocol_type": "consumer",
                         "protocols": [{"name": "cooperative-sticky", "metadata": meta}], "reason": None})
        if r["error_code"] != 0:
            raise AssertionError(f"JoinGroup: {r}")
        member, gen = r["member_id"], r["generation_id"]
        if gen < last:
            raise AssertionError(f"JoinGroup answered generation {gen} after {last} was acknowledged")
        s = call(14, 5, {"group_id": "pl-static", "generation_id": gen, "member_id": member,
                         "group_instance_id": "pl-1", "protocol_type": "consumer",
                         "protocol_name": "cooperative-sticky",
                         "assignments": [] if r["skip_assignment"] or r["leader"] != member else
                         [{"member_id": member, "assignment": protocol.encode_assignment({"sg": [0]})}]})
        if s["error_code"] != 0:
            raise AssertionError(f"SyncGroup: {s}")
        last = gen
        acks.write(f"S pl-static {gen}")
        time.sleep(0.02)  # a moment in which the generation's record is the newest promise (the commit flushes it too)
        offset += rng.randint(1, 5)
        c = call(8, 8, {"group_id": "pl-static", "generation_id_or_member_epoch": gen, "member_id": member,
                        "group_instance_id": "pl-1", "topics": [{"name": "sg", "partitions": [
                            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                             "committed_metadata": ""}]}]})
        if c["topics"][0]["partitions"][0]["error_code"] != 0:
            raise AssertionError(f"OffsetCommit: {c}")
        acks.write(f"C pl-static sg 0 {offset}")


def w_kip848_group(data, acks, rng, wid):
    """KIP-848 members on the broker workload, over the wire: each joins (a new member: the group epoch goes up),
    heartbeats until it holds its assignment, and leaves (up again); a member epoch is acknowledged once a heartbeat
    answered it. The group's stored epoch must never be lower than one acknowledged."""
    import socket
    import struct
    import uuid

    from kafkalog.broker import protocol
    while not os.path.exists(port_file(acks)):
        time.sleep(0.02)
    with open(port_file(acks)) as f:
        port = int(f.read())
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    corr = [0]

    def hb(member, epoch, topics=None, owned=None):
        corr[0] += 1
        sock.sendall(protocol.encode_request(68, 1, corr[0], "kip848-pl", {
            "group_id": "pl-kip848", "member_id": member, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 30000 if epoch == 0 else -1, "subscribed_topic_names": topics,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": owned}))
        (n,) = struct.unpack(">i", _read(sock, 4))
        r = protocol.decode_response(68, 1, _read(sock, n))[1]
        if r["error_code"] != 0:
            raise AssertionError(f"ConsumerGroupHeartbeat: {r}")
        return r

    corr[0] += 1
    sock.sendall(protocol.encode_request(19, 5, corr[0], "kip848-pl", {
        "topics": [{"name": "kg", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 30000, "validate_only": False}))
    (n,) = struct.unpack(">i", _read(sock, 4))
    _read(sock, n)
    while True:
        member = str(uuid.uuid4())
        r = hb(member, 0, topics=["kg"], owned=[])
        for _ in range(rng.randint(1, 3)):
            owned = [{"topic_id": tp["topic_id"], "partitions": tp["partitions"]}
                     for tp in (r["assignment"] or {}).get("topic_partitions", [])]
            acks.write(f"K pl-kip848 {r['member_epoch']}")
            r = hb(member, r["member_epoch"], owned=owned)
        hb(member, -1)


def w_share_member(data, acks, rng, wid):
    """A KIP-932 share-group member on the broker workload, over the wire: it appends batches to the two partitions
    of topic "sh" (acks=all: R lines), acquires them through ShareFetch and accepts, releases or rejects them
    (piggy-backed, or alone in a ShareAcknowledge); an offset is settled for good once the answer to its ACCEPT or
    REJECT came back without error (A lines). After each power loss it comes back as a new member: the recovered
    share-partition state must hold every A offset as done (never to be delivered again), and have lost no R
    record."""
    import socket
    import struct
    import uuid

    from kafkalog.broker import protocol
    while not os.path.exists(port_file(acks)):
        time.sleep(0.02)
    with open(port_file(acks)) as f:
        port = int(f.read())
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    corr = [0]

    def call(key, version, body):
        corr[0] += 1
        sock.sendall(protocol.encode_request(key, version, corr[0], "share-pl", body))
        (n,) = struct.unpack(">i", _read(sock, 4))
        return protocol.decode_response(key, version, _read(sock, n))[1]

    r = call(19, 5, {"topics": [{"name": "sh", "num_partitions": 2, "replication_factor": 1, "assignments": [],
                                 "configs": []}], "timeout_ms": 30000, "validate_only": False})
    assert r["topics"][0]["error_code"] in (0, 36), r
    member = str(uuid.uuid4())
    r = call(76, 1, {"group_id": "pl-share", "member_id": member, "member_epoch": 0, "rack_id": None,
                     "subscribed_topic_names": ["sh"]})
    assert r["error_code"] == 0, r
    tid = call(3, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": "sh"}], "allow_auto_topic_creation": False,
                       "include_topic_authorized_operations": False})["topics"][0]["topic_id"]
    # two partitions, which a fetch's acquisition takes in turns: a fetch's piggy-backed acknowledgements are of
    # the partition the acquisition tries first or of the other one (applied beside the acquisition)
    epoch, pending = 0, {0: [], 1: []}  # partition: [(first, last, type)] to send with the next request

    def settle(p, answer_code):
        if answer_code == 0:
            done = [f"A sh {p} {o}" for first, last, t in pending[p] if t in (1, 3) for o in range(first, last + 1)]
            if done:
                acks.write(*done)

    def answered(r, p):
        return next((x for t in r["responses"] for x in t["partitions"] if x["partition_index"] == p), None)
    while True:
        p = rng.randrange(2)
        vals = values(rng, f"s{wid}", rng.randint(1, 20))
        r = call(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
            {"name": "sh", "partition_data": [{"index": p, "records": bytes(build_batch(vals))}]}]})
        part = r["responses"][0]["partition_responses"][0]
        assert part["error_code"] == 0, r
        acks.write(*(f"R sh {p} {part['base_offset'] + i} {digest(v)}" for i, v in enumerate(vals)))
        batches = {q: [{"first_offset": a, "last_offset": b, "acknowledge_types": [t]} for a, b, t in pending[q]]
                   for q in (0, 1)}
        if any(batches.values()) and rng.random() < 0.3:  # alone, in a ShareAcknowledge
            r = call(79, 2, {"group_id": "pl-share", "member_id": member, "share_session_epoch": epoch,
                             "is_renew_ack": False, "topics": [{"topic_id": tid, "partitions": [
                                 {"partition_index": q, "acknowledgement_batches": b}
                                 for q, b in batches.items() if b]}]})
            assert r["error_code"] == 0, r
            for q in (0, 1):
                if batches[q]:
                    settle(q, answered(r, q)["error_code"])
            epoch += 1
            pending, batches = {0: [], 1: []}, {0: [], 1: []}
        r = call(78, 2, {"group_id": "pl-share", "member_id": member, "share_session_epoch": epoch,
                         "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": rng.randint(1, 30),
                         "batch_size": 30, "share_acquire_mode": rng.choice([0, 1]), "is_renew_ack": False,
                         "topics": [{"topic_id": tid, "partitions": [
                             {"partition_index": q, "acknowledgement_batches": batches[q]} for q in (0, 1)]}],
                         "forgotten_topics_data": []})
        assert r["error_code"] == 0, r
        epoch += 1
        for q in (0, 1):
            x = answered(r, q)
            if batches[q]:
                settle(q, x["acknowledge_error_code"] if x is not None else 0)
            pending[q] = [(o, o, rng.choice([1, 1, 1, 2, 3]))  # mostly ACCEPT, some RELEASE and REJECT
                          for a in (x["acquired_records"] if x is not None else ())
                          for o in range(a["first_offset"], a["last_offset"] + 1)]


def _read(sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


WORKLOADS = {name[2:]: fn for name, fn in globals().items() if name.startswith("w_")}


def main(argv) -> int:
    name, data, ack_path, seed = argv[:4]
    wid = int(argv[4]) if len(argv) > 4 else 0
    rng = random.Random(f"{seed}-{name}-{wid}")
    WORKLOADS[name](data, Acks(ack_path), rng, wid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
