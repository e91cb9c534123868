"""Checks of transactions shared by the power-loss tests (tests/powerloss/test_powerloss.py) and the multi-process
kill -9 torture of transactions (tests/storage/test_txn_torture.py): what the acknowledgement lines of transactional
writers promise (the X lines of tests/powerloss/workloads.py), held against a store, and a read_committed reader
that reads as a Kafka client does.

Plain module (no pytest in it), loaded by path under ``MODULE_NAME`` (one copy per process), as tests/children.py is.
"""

from __future__ import annotations

import collections
import hashlib
import time
from pathlib import Path

from kafkalog import TopicPartition

MODULE_NAME = "kafkalog_test_txncheck"


def read_txn_acks(path: Path):
    """The transactional workload's lines (workloads.py) in the acknowledgement file ``path``: see
    ``parse_txn_acks``."""
    return parse_txn_acks(path.read_text().splitlines() if path.exists() else [])


def parse_txn_acks(lines):
    """The transactional lines (X...) of ``lines``: per transaction its acknowledged records {(topic, partition,
    offset): sha1}, its offset commits [(group, topic, partition, offset)], how its end was called and how it
    returned; the last stable offsets seen after ends returned; per group its transactions in the order of their
    commits (the order of the XO lines)."""
    txns = collections.defaultdict(lambda: {"records": {}, "offsets": [], "called": None, "returned": None})
    stable = collections.defaultdict(int)
    group_order = collections.defaultdict(list)
    for line in lines:
        w = line.split()
        if not w or not w[0].startswith("X"):
            continue
        if w[0] == "XR" and len(w) == 6:
            txns[w[1]]["records"][(w[2], int(w[3]), int(w[4]))] = w[5]
        elif w[0] == "XO" and len(w) == 6:
            txns[w[1]]["offsets"].append((w[2], w[3], int(w[4]), int(w[5])))
            group_order[w[2]].append(w[1])
        elif w[0] == "XE" and len(w) == 3:
            txns[w[1]]["called"] = w[2]
        elif w[0] == "XD" and len(w) == 3:
            txns[w[1]]["returned"] = w[2]
        elif w[0] == "XS" and len(w) == 4:
            key = (w[1], int(w[2]))
            stable[key] = max(stable[key], int(w[3]))
    return txns, stable, group_order


def read_committed(log) -> tuple[list[tuple[int, bytes]], int]:
    """Every record of ``log`` a read_committed consumer gets, the way a Kafka client gets them: Fetch with
    isolation (fetch_isolated: batches below the last stable offset and the aborted transactions they may hold), and
    per fetch response, a transactional batch of a producer whose aborted transaction started at or before the
    batch's last offset is dropped, up to that producer's ABORT marker (Kafka's CompletedFetch). Returns [(offset,
    value)] and the last stable offset."""
    from kafkalog._engine.batch import iter_batches
    from kafkalog.storage.txnformat import marker_of_batch
    out = []
    pos = log.log_start_offset
    while True:
        _, _, lso, data, aborted = log.fetch_isolated(pos, 1 << 20, True)
        if data is None or not len(data):
            return out, lso
        upcoming = sorted(aborted, key=lambda a: a[1])
        dropping: set[int] = set()
        moved = pos
        for batch in iter_batches(data):
            if batch.next_offset <= moved:
                continue
            while upcoming and upcoming[0][1] <= batch.last_offset:
                dropping.add(upcoming.pop(0)[0])
            if batch.is_control:
                marker = marker_of_batch(data, batch.position) if batch.is_transactional else None
                if marker is not None and not marker[0]:
                    dropping.discard(batch.producer_id)
            elif not (batch.is_transactional and batch.producer_id in dropping):
                out.extend((rec.offset, bytes(rec.value)) for rec in batch if rec.offset >= moved)
            moved = batch.next_offset
        if moved <= pos:
            return out, lso
        pos = moved


def txn_of(value: bytes) -> str | None:
    """The transaction a record of the transactional workload belongs to (its value is X<txn>-<i>-...)."""
    if not value.startswith(b"X"):
        return None
    return value[1:].split(b"-", 1)[0].decode(errors="replace")


def check_transactions(store, acks: Path) -> list[str]:
    """What the power-loss workload's acknowledgements in ``acks`` promise (check_txn_outcomes)."""
    return check_txn_outcomes(store, *read_txn_acks(acks))


def check_txn_outcomes(store, txns, stable, group_order) -> list[str]:
    """What the transactional workload's acknowledgements promise, after a reload (opening the coordinator completes
    every PrepareX on disk) and the abort of what is still open (as its timeout would):

    * the last stable offset of each partition is not below one seen after an end_txn returned;
    * every transaction whose commit returned is visible whole to read_committed, at its acknowledged offsets, once;
      a transaction whose commit was called but did not return is visible whole or not at all; an aborted one, or one
      never ended, not at all;
    * the groups' committed offsets come from a visible transaction, and not from one older than the last whose
      commit returned; nothing is left pending;
    * once nothing is open, the last stable offset of every partition is its high watermark.
    """
    if not txns:
        return []
    problems = []
    coord = store.transactions  # opening completes every PrepareX on disk
    parts = sorted({(t, p) for x in txns.values() for (t, p, _) in x["records"]} | set(stable))
    for (t, p) in parts:
        lso = store.log(t, p).last_stable_offset
        if lso < stable[(t, p)]:
            problems.append(f"{t}-{p}: last stable offset {lso} is below {stable[(t, p)]}, seen after an end_txn "
                            f"returned")
    coord.expire(now_ms=int(time.time() * 1000) + 700_000)  # what is still Ongoing (timeout 600 s) is aborted
    visible = collections.defaultdict(dict)  # txn -> {(t, p, offset): sha1}
    for (t, p) in parts:
        log = store.log(t, p)
        if log.open_transactions():
            problems.append(f"{t}-{p}: transactions still open after the aborts: {log.open_transactions()}")
        records, lso = read_committed(log)
        if lso != log.high_watermark:
            problems.append(f"{t}-{p}: last stable offset {lso} is not the high watermark {log.high_watermark} "
                            f"with nothing open")
        offsets = [o for o, _ in records]
        if offsets != sorted(set(offsets)):
            problems.append(f"{t}-{p}: read_committed returned offsets out of order or twice")
        for o, v in records:
            name = txn_of(v)
            if name is not None:
                visible[name][(t, p, o)] = hashlib.sha1(v).hexdigest()
    for name, x in sorted(txns.items()):
        seen = visible.get(name, {})
        acked = x["records"]
        whole = all(seen.get(k) == sha for k, sha in acked.items())
        if x["returned"] == "commit" and not whole:
            missing = sorted(k for k, sha in acked.items() if seen.get(k) != sha)
            problems.append(f"transaction {name}: its commit returned, but {len(missing)} of its {len(acked)} "
                            f"acknowledged records are not visible to read_committed (first {missing[:4]})")
        elif x["called"] == "commit" and seen and not whole:
            problems.append(f"transaction {name} (commit called, not returned): partly visible ({len(seen)} "
                            f"records visible, {len(acked)} acknowledged)")
        elif x["called"] != "commit" and seen:
            why = "aborted" if x["called"] == "abort" else "never ended"
            problems.append(f"transaction {name} ({why}): {len(seen)} of its records are visible to read_committed "
                            f"(first {sorted(seen)[:4]})")
        extra = sorted(k for k in seen if k not in acked)
        if extra:  # end_txn is called only once every record of the transaction is flushed and acknowledged
            problems.append(f"transaction {name}: records visible at offsets never acknowledged: {extra[:4]}")
    committed_txns = {n for n, x in txns.items() if x["returned"] == "commit" or (x["called"] == "commit"
                                                                                   and visible.get(n))}
    for group, order in sorted(group_order.items()):
        by_value = {}
        for n in order:
            for g, t, p, v in txns[n]["offsets"]:
                if g == group:
                    by_value[(t, p, v)] = n
        tps = {(t, p) for (t, p, _) in by_value}
        for t, p in sorted(tps):
            got = store.offsets.committed(group, TopicPartition(t, p))
            must = [i for i, n in enumerate(order) if txns[n]["returned"] == "commit"
                    and any((g, tt, pp) == (group, t, p) for g, tt, pp, _ in txns[n]["offsets"])]
            if got is None:
                if must:
                    problems.append(f"group {group} {t}-{p}: no committed offset, the commit of transaction "
                                    f"{order[must[-1]]} returned")
                continue
            n = by_value.get((t, p, got.offset))
            if n is None or n not in committed_txns:
                problems.append(f"group {group} {t}-{p}: committed offset {got.offset} is from "
                                f"{'no transaction' if n is None else 'transaction ' + n + ', not committed'}")
            elif must and order.index(n) < must[-1]:
                problems.append(f"group {group} {t}-{p}: committed offset {got.offset} of transaction {n} is older "
                                f"than that of {order[must[-1]]}, whose commit returned")
        pending = store.offsets.pending(group)
        if pending:
            problems.append(f"group {group}: transactional commits still pending with nothing open: {pending}")
    return problems

