"""Child processes of the multi-process kill -9 torture of transactions (tests/storage/test_txn_torture.py), run by
crash_writer.py's fork server (a spec with ``"ops_module"`` naming this file: crash_writer.ops_of).

Ops: ``txn_open`` (a shared LogStore), ``txn_writer`` (embedded transactional KafkaProducers), ``txn_reader``
(read_committed through Log.records or KafkaConsumer), ``txn_deleter`` (delete-before, rolls and the coordinator's
expiry beside them). Journal lines, one writer's lines in the order it did things (``X`` lines in the power-loss
workload's format, tests/txncheck.py, fsynced as acknowledgements are):

    R                               the store is open
    I <tid> <pid> <epoch>           init_transactions() returned
    P <txn> <tid> <t>:<p> ...       a transaction is about to begin: its record i goes to the i-th partition named
    XR <txn> <t> <p> <offset> <sha1>    a record of it is written and fsynced at that offset (its future resolved:
                                    after a flush() inside the transaction, and every record after the commit returned)
    XO <txn> <group> <t> <p> <offset>   send_offsets_to_transaction() returned; written with
    XT <txn> <monotonic ns>         when (the groups' order of transactions across writers)
    XE <txn> commit|abort           commit_transaction() / abort_transaction() is being called
    XD <txn> commit|abort           it returned; then
    XS <t> <p> <lso>                the last stable offset of each partition of the transaction right after
    XF <txn> <tid>                  ProducerFencedError (a newer instance of the id, or the timeout): the producer is
                                    closed, a new instance is made when the id is picked again
    K <failpoint>                   from here the failpoint kills this writer at its next hit
    Z                               its transactions are done: it writes nothing more and waits for the stop file
    V <t> <p> <offset> <txn> <i>    (reader) a record read_committed returned
    L <t> <p> <lso>                 (reader) the last stable offset it saw (journaled when it changes)
    D <t> <p> <log start>           (deleter) delete_records_before returned (fsynced)
    E <message>                     a broken invariant or an unexpected error (the test fails on it)

A record's value is ``X<txn>-<i>-<padding>``: its transaction and index (txncheck.txn_of).
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
import traceback

TOPICS = {"ta": 3, "tb": 2}
PARTITIONS = [(t, p) for t, n in TOPICS.items() for p in range(n)]
KEEP = "ta"  # never deleted from: every transaction has a record here (its outcome stays readable)
DELETED = "tb"  # the deleter's delete-before moves the log start of these partitions
OFFSETS_TP = ("ta", 0)  # the partition whose offset the transactions commit for their id's group


def value_of(name: str, i: int, pad: int) -> bytes:
    return b"X%s-%d-%s" % (name.encode(), i, b"." * pad)


def index_of(value: bytes) -> int | None:
    try:
        return int(value.split(b"-", 2)[1])
    except (IndexError, ValueError):
        return None


def _lines(ctx, lines, sync: bool = True) -> None:
    """Several journal lines in one write (O_APPEND: never mixed with another thread's), fsynced."""
    os.write(ctx.journal.fd, "".join(ln + "\n" for ln in lines).encode())
    if sync:
        os.fsync(ctx.journal.fd)


def op_txn_open(ctx, config=None, read_only=False):
    from kafkalog import LogStore
    ctx.store = LogStore(ctx.dir, config or {}, read_only=read_only, maintenance=False)
    ctx.journal.note("R", sync=True)


def _wait_stop(stop_file) -> None:
    while not os.path.exists(stop_file):
        time.sleep(0.005)


def op_txn_writer(ctx, wid, seed, ids, txns, stop_file, threads=2, failpoint=None, failpoint_after=0):
    """``threads`` threads, each with its share of ``ids`` ([transactional id, transaction timeout ms, shared with
    another process]) and ``txns // threads`` transactions of 1-8 records (at most 1.5 KiB each), the first to a
    ``KEEP`` partition, the others anywhere; some flushed midway, half with the id's group's offset; 70 % committed,
    30 % aborted; now and then a shared id gets a new producer instance (fencing the other process's). With
    ``failpoint``, armed (action kill) once ``failpoint_after`` transactions ended. Then ``Z`` and it waits."""
    from kafkalog import KafkaProducer, TopicPartition
    from kafkalog.errors import ProducerFencedError
    from kafkalog.storage import failpoints

    store = ctx.store
    lock = threading.Lock()
    ended = [0]

    def end_one():
        with lock:
            if failpoint and ended[0] == failpoint_after:
                _lines(ctx, [f"K {failpoint}"])
                failpoints.enable(failpoint, "kill")
            ended[0] += 1

    def run(k, mine, n):
        rng = random.Random(f"{seed}-{k}")
        producers = {}
        for j in range(n):
            end_one()
            tid, timeout, shared = rng.choice(mine)
            prod = producers.get(tid)
            name = f"{wid}.{k}.{j}"
            try:
                if prod is not None and shared and rng.random() < 0.15:
                    prod.close()  # between transactions: the new instance fences the other process's
                    prod = None
                if prod is None:
                    prod = producers[tid] = KafkaProducer(store, transactional_id=tid, transaction_timeout_ms=timeout,
                                                          linger_ms=rng.choice([0, 0, 2]), batch_size=4096,
                                                          client_id=f"w{wid}-{tid}")
                    prod.init_transactions()
                    _lines(ctx, [f"I {tid} {prod._pid} {prod._epoch}"], sync=False)
                parts = [(KEEP, rng.randrange(TOPICS[KEEP]))] + [rng.choice(PARTITIONS)
                                                                 for _ in range(rng.randint(0, 7))]
                _lines(ctx, [f"P {name} {tid} " + " ".join(f"{t}:{p}" for t, p in parts)])
                prod.begin_transaction()
                sent = []
                flush_at = rng.randrange(len(parts) + 1) if rng.random() < 0.3 else -1
                for i, (t, p) in enumerate(parts):
                    if i == flush_at:
                        prod.flush()  # written and fsynced: their offsets are known before the end
                        _lines(ctx, [f"XR {name} {t2} {p2} {f.get(timeout=0).offset} {hashlib.sha1(v).hexdigest()}"
                                     for t2, p2, v, f in sent])
                    pad = rng.choice([0, rng.randint(1, 200), rng.randint(200, 1500)])
                    v = value_of(name, i, pad)
                    sent.append((t, p, v, prod.send(t, v, partition=p)))
                if rng.random() < 0.5:
                    group, off = f"g-{tid}", wid * 1_000_000 + k * 100_000 + j
                    prod.send_offsets_to_transaction({TopicPartition(*OFFSETS_TP): off}, group)
                    _lines(ctx, [f"XO {name} {group} {OFFSETS_TP[0]} {OFFSETS_TP[1]} {off}",
                                 f"XT {name} {time.monotonic_ns()}"])
                how = "commit" if rng.random() < 0.7 else "abort"
                _lines(ctx, [f"XE {name} {how}"])
                if how == "commit":
                    prod.commit_transaction()
                else:
                    prod.abort_transaction()
                done = [f"XD {name} {how}"]
                if how == "commit":
                    done += [f"XR {name} {t} {p} {f.get(timeout=0).offset} {hashlib.sha1(v).hexdigest()}"
                             for t, p, v, f in sent]
                done += [f"XS {t} {p} {store.log(t, p).last_stable_offset}" for t, p in sorted(set(parts))]
                _lines(ctx, done)
            except ProducerFencedError:
                _lines(ctx, [f"XF {name} {tid}"])
                prod.close()
                producers[tid] = None
            if rng.random() < 0.05:
                time.sleep(rng.random() * 0.02)
        for prod in producers.values():
            if prod is not None:
                prod.close()

    def thread(k, mine, n):
        try:
            run(k, mine, n)
        except BaseException:
            ctx.fail(f"writer {wid} thread {k}: {traceback.format_exc()}")

    threads = min(threads, len(ids))
    workers = [threading.Thread(target=thread, args=(k, ids[k::threads], txns // threads)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    ctx.journal.note("Z", sync=True)
    _wait_stop(stop_file)
    store.close()


def op_txn_reader(ctx, seed, stop_file, kind="log", pause_s=0.05):
    """Read every partition with isolation_level="read_committed" as records appear (``kind``: "log" for
    Log.records, "consumer" for a KafkaConsumer assigned every partition) until the stop file exists, then once more
    to the end. Journals each record (``V``) and each new last stable offset (``L``); a last stable offset going
    back, offsets going back, or a value that is no transaction's record are ``E`` lines."""
    from kafkalog import KafkaConsumer, TopicPartition
    from kafkalog.errors import OffsetOutOfRangeError

    rng = random.Random(seed)
    store = ctx.store
    last_lso = {tp: -1 for tp in PARTITIONS}
    last_off = {tp: -1 for tp in PARTITIONS}
    out: list[str] = []

    def saw(t, p, offset, value):
        i = index_of(value)
        if not value.startswith(b"X") or i is None:
            out.append(f"E {t}-{p}: offset {offset} holds no transaction's record: {value[:40]!r}")
            return
        if offset <= last_off[(t, p)]:
            out.append(f"E {t}-{p}: offset {offset} after {last_off[(t, p)]}")
        last_off[(t, p)] = offset
        out.append(f"V {t} {p} {offset} {value[1:].split(b'-', 1)[0].decode()} {i}")

    def lso_is(t, p, lso):
        if lso < last_lso[(t, p)]:
            out.append(f"E {t}-{p}: the last stable offset went back from {last_lso[(t, p)]} to {lso}")
        if lso != last_lso[(t, p)]:
            out.append(f"L {t} {p} {lso}")
        last_lso[(t, p)] = max(last_lso[(t, p)], lso)

    consumer = None
    tps = [TopicPartition(t, p) for t, p in PARTITIONS]
    if kind == "consumer":
        consumer = KafkaConsumer(store=store, isolation_level="read_committed", enable_auto_commit=False,
                                 auto_offset_reset="earliest", group_id=None)
        consumer.assign(tps)
    pos = {tp: 0 for tp in PARTITIONS}
    while True:
        stopping = os.path.exists(stop_file)
        if consumer is not None:
            for tp, end in consumer.end_offsets(tps).items():
                lso_is(tp.topic, tp.partition, end)
            while True:
                got = consumer.poll(timeout_ms=20)
                for tp, recs in got.items():
                    for r in recs:
                        saw(tp.topic, tp.partition, r.offset, bytes(r.value))
                if not got or not stopping:
                    break
        else:
            for t, p in PARTITIONS:
                log = store.log(t, p)
                lso = log.last_stable_offset
                lso_is(t, p, lso)
                try:
                    pos[(t, p)] = max(pos[(t, p)], log.log_start_offset)
                    for rec in log.records(pos[(t, p)], isolation_level="read_committed"):
                        saw(t, p, rec.offset, bytes(rec.value))
                        pos[(t, p)] = rec.offset + 1
                except OffsetOutOfRangeError:
                    continue  # deleted meanwhile: again from the new log start
                pos[(t, p)] = max(pos[(t, p)], lso)  # everything below it was returned (the stable part only grows)
        if out:
            _lines(ctx, out, sync=False)
            out.clear()
        if stopping:
            break
        time.sleep(rng.random() * pause_s)
    if consumer is not None:
        consumer.close()
    store.close()


def op_txn_deleter(ctx, seed, stop_file, every=(5, 40), pause_s=0.02):
    """Beside the writers until the stop file exists: delete-before on a ``DELETED`` partition each time it grew by
    a random ``every`` records (to a random offset between its log start and high watermark, open transactions
    included), a roll of any partition each time it grew by as many, and the coordinator's expiry of timed-out
    transactions every tenth delete. Bounded by what the writers write."""
    rng = random.Random(seed)
    store = ctx.store
    grown = {tp: (0, rng.randint(*every)) for tp in PARTITIONS}  # high watermark at the last act, growth wanted
    rolled = {tp: (0, rng.randint(*every)) for tp in PARTITIONS}
    deletes = 0
    while not os.path.exists(stop_file):
        for t, p in PARTITIONS:
            log = store.log(t, p)
            hw = log.high_watermark
            at, want = rolled[(t, p)]
            if hw - at >= want:
                log.roll()
                rolled[(t, p)] = (hw, rng.randint(*every))
            at, want = grown[(t, p)]
            if t == DELETED and hw - at >= want:
                start = log.log_start_offset
                got = log.delete_records_before(rng.randint(start, hw))
                _lines(ctx, [f"D {t} {p} {got}"])
                log.purge_deleted()
                grown[(t, p)] = (hw, rng.randint(*every))
                deletes += 1
                if deletes % 10 == 0:
                    store.expire_transactions()
        time.sleep(rng.random() * pause_s)
    store.close()


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}
