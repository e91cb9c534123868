"""Transactions v2 (KIP-890 part 2) on the wire, differential: the same raw requests (tests/broker/wire.py) to
Apache Kafka 4.4 at its default transaction.version=2 (the lab's session Kafka) and to kafkalog, the answers
compared step by step: Produce v12's implicit partition add, TxnOffsetCommit v5's implicit offsets add, EndTxn v5's
epoch bump per transaction (its answer's producer id and epoch, retries, empty aborts, the opposite result), the
fencing of the old epoch (Produce and TxnOffsetCommit), AddPartitionsToTxn v4/v5 (VerifyOnly and add), the batches
and markers each log holds (producer epochs, control batches, sequences), and the ``__transaction_state`` records
both coordinators wrote for the transactional id (TransactionLogValue v1 with its tagged fields).

Producer ids and epochs are compared relative to the ones InitProducerId gave (each broker hands out its own);
timestamps are not compared. Cost: the lab's session pair, a few milliseconds per request (about 1 s a module
run, most of it waiting for Kafka's coordinator on first use).
"""

from __future__ import annotations

import time
import uuid

from kafkalog._engine.batch import iter_batches
from kafkalog.storage.offsets import partition_for
from kafkalog.storage.txnformat import decode_txn_log_key, decode_txn_log_value
from tests.broker.wire import Wire, batch

from .lab import assert_same

LAB_TEST_DEADLINE_S = 120


class Side:
    def __init__(self, target):
        self.name = target.name
        self.w = Wire(int(target.bootstrap.rsplit(":", 1)[1]), timeout=30)
        self.pid = self.epoch0 = None
        self.ids = {}

    def close(self):
        self.w.close()

    def call(self, key, version, body):
        return self.w.call(key, version, body)

    def ready(self, key_type: int, key: str) -> None:
        for _ in range(150):  # Kafka creates its coordinators' topics on the first ask
            r = self.call(10, 3, {"key": key, "key_type": key_type})
            if r["error_code"] == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no coordinator for key type {key_type}: {r}")

    def create(self, topic: str, partitions: int = 1) -> None:
        r = self.w.create_topic(topic, partitions)
        assert r["error_code"] == 0, (self.name, r)
        for _ in range(100):  # until Kafka's new partitions have their leader
            rec = batch([b"probe"])
            md = self.call(3, 12, {"topics": [{"topic_id": _zero(), "name": topic}],
                                   "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})["topics"][0]
            if md["error_code"] == 0 and all(p["leader_id"] >= 0 for p in md["partitions"]):
                self.ids[topic] = md["topic_id"]
                return
            del rec
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: topic {topic} has no leader")

    # relative ids: the producer id InitProducerId gave is "P", another "P+n"; epochs relative to its first
    def rel(self, pid, epoch):
        if pid == -1:
            return (-1, epoch)
        return ("P" if pid == self.pid else f"P{pid - self.pid:+d}", epoch - self.epoch0 if epoch >= 0 else epoch)

    def init(self, txn: str, timeout_ms: int = 60000, version: int = 5) -> dict:
        for _ in range(100):  # a coordinator still loading (Kafka, right after it made __transaction_state)
            r = self.call(22, version, {"transactional_id": txn, "transaction_timeout_ms": timeout_ms,
                                        "producer_id": -1, "producer_epoch": -1})
            if r["error_code"] not in (14, 15, 16, 51):
                break
            time.sleep(0.2)
        if self.pid is None and r["error_code"] == 0:
            self.pid, self.epoch0 = r["producer_id"], r["producer_epoch"]
        return {"error_code": r["error_code"], "id": self.rel(r["producer_id"], r["producer_epoch"])}

    def produce(self, txn, topic, partition, values, pid, epoch, seq, version=12, topic_id=None) -> int:
        records = batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=txn is not None)
        if version >= 13 and topic_id is None:
            topic_id = self.ids[topic]
        for _ in range(50):
            r = self.call(0, version, {"transactional_id": txn, "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "topic_id": topic_id, "partition_data": [{"index": partition, "records": records}]}]})
            code = r["responses"][0]["partition_responses"][0]["error_code"]
            if code != 6:  # NOT_LEADER_OR_FOLLOWER: Kafka, right after the topic's creation
                break
            time.sleep(0.1)
        if version >= 13:
            assert r["responses"][0]["topic_id"] == topic_id, (self.name, r)
        return code

    def end(self, txn, pid, epoch, commit, version=5) -> dict:
        """EndTxn, repeated while CONCURRENT_TRANSACTIONS (as clients do): Kafka answers once PrepareX is written
        and writes the markers after, so a request right after an EndTxn may find it completing (kafkalog answers
        after the markers: it never does). The answer that settles it is compared."""
        for _ in range(200):
            r = self.call(26, version, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": commit})
            if r["error_code"] != 51:
                break
            time.sleep(0.02)
        out = {"error_code": r["error_code"]}
        if version >= 5:
            out["id"] = self.rel(r["producer_id"], r["producer_epoch"])
        return out

    def settle(self, txn) -> str:
        """Until the transaction's markers are written (DescribeTransactions: no longer PrepareX). Kafka answers
        EndTxn once PrepareX is written and writes the markers after: a batch of the old epoch sent meanwhile is
        still taken into the transaction there (kafkalog answers after its markers: no such window)."""
        for _ in range(200):
            r = self.call(65, 0, {"transactional_ids": [txn]})["transaction_states"][0]
            if r["transaction_state"] not in ("PrepareCommit", "PrepareAbort"):
                return r["transaction_state"]
            time.sleep(0.02)
        raise AssertionError(f"{self.name}: {txn} stays {r['transaction_state']}")

    def txn_offset_commit(self, txn, group, pid, epoch, topic, offset, version=5, topic_id=None) -> list:
        if version >= 6 and topic_id is None:
            topic_id = self.ids[topic]
        r = self.call(28, version, {"transactional_id": txn, "group_id": group, "producer_id": pid,
                                    "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                    "group_instance_id": None, "topics": [
                                        {"name": topic, "topic_id": topic_id, "partitions": [
                                            {"partition_index": 0, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        return [(self.rel_topic(t.get("topic_id")) if version >= 6 else t["name"], p["error_code"])
                for t in r["topics"] for p in t["partitions"]]

    def rel_topic(self, topic_id):
        return next((name for name, tid in self.ids.items() if tid == topic_id), str(topic_id))

    def add_v4(self, version, txn, pid, epoch, topic, partitions, verify_only) -> dict:
        r = self.call(24, version, {"transactions": [
            {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "verify_only": verify_only,
             "topics": [{"name": topic, "partitions": partitions}]}]})
        return {"error_code": r["error_code"], "results": sorted(  # Kafka's order is a hash map's
            (t["transactional_id"], x["name"], p["partition_index"], p["partition_error_code"])
            for t in r["results_by_transaction"] for x in t["topic_results"] for p in x["results_by_partition"])}

    def group_log(self, group: str) -> dict:
        """What this producer wrote to the group's __consumer_offsets partition (Kafka's partitionFor over the
        broker's own partition count: 50 on Kafka, 1 on kafkalog), in order: its transactional offset batches and
        their markers, and the aborted transactions of it the first fetch lists. Other producers' records (other
        tests of the session share the partition) are left out."""
        md = self.call(3, 12, {"topics": [{"topic_id": _zero(), "name": "__consumer_offsets"}],
                               "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})["topics"][0]
        partition = partition_for(group, len(md["partitions"]))
        first, batches = self.batches("__consumer_offsets", partition=partition)
        # this producer's alone ("P"): other producers' transactional offsets (Kafka Streams' on the session
        # kafkalog, say) land in the same partition on kafkalog
        mine = [(b["control"], b["txn"], b["id"], b["seq"], None if b["values"] is None else len(b["values"]))
                for b in batches if b["id"][0] == "P"]
        return {"error_code": first["error_code"], "batches": mine,
                "aborted": [a[0] for a in first["aborted"] if a[0] == "P"]}

    def batches(self, topic, partition=0, isolation=0) -> list:
        """Every batch up to the fetchable end, fetched from the next offset until there (both brokers answer
        fewer batches than max_bytes would take at times); the first fetch's partition fields."""
        out, first, offset = [], None, 0
        for _ in range(50):
            r = self.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                  "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "topics": [
                                      {"topic": topic, "partitions": [
                                          {"partition": partition, "current_leader_epoch": -1,
                                           "fetch_offset": offset, "log_start_offset": -1,
                                           "partition_max_bytes": 1 << 20}]}],
                                  "forgotten_topics_data": [], "rack_id": ""})
            p = r["responses"][0]["partitions"][0]
            if first is None:
                first = {"error_code": p["error_code"], "lso": p["last_stable_offset"], "hw": p["high_watermark"],
                         "aborted": [(self.rel(a["producer_id"], 0)[0], a["first_offset"])
                                     for a in (p["aborted_transactions"] or [])]}
            end = p["last_stable_offset"] if isolation else p["high_watermark"]
            got = list(iter_batches(bytes(p["records"] or b"")))
            for b in got:
                out.append({"offset": b.base_offset, "id": self.rel(b.producer_id, b.producer_epoch),
                            "seq": b.base_sequence, "control": b.is_control, "txn": b.is_transactional,
                            "values": None if b.is_control else [None if r.value is None else bytes(r.value)
                                                                 for r in b]})
            if not got or p["error_code"]:
                break
            offset = got[-1].base_offset + got[-1].last_offset_delta + 1
            if offset >= end:
                break
        return [first, out]

    def txn_log(self, txn) -> list:
        """The __transaction_state records of ``txn`` (value decoded; timestamps and partition order left out)."""
        r = self.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 8 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                  {"topic": "__transaction_state", "partitions": [
                                      {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                       "log_start_offset": -1, "partition_max_bytes": 8 << 20}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
        p = r["responses"][0]["partitions"][0]
        assert p["error_code"] == 0, (self.name, p)
        out = []
        for b in iter_batches(bytes(p["records"] or b"")):
            for rec in b:
                if decode_txn_log_key(bytes(rec.key)) != txn:
                    continue
                raw = bytes(rec.value)
                v = decode_txn_log_value(raw)
                out.append({"version": int.from_bytes(raw[:2], "big"), "id": self.rel(v.producer_id,
                                                                                         v.producer_epoch),
                            "state": v.state_name, "timeout": v.timeout_ms,
                            "partitions": None if v.partitions is None else
                            {t: sorted(ps) for t, ps in v.partitions.items()},
                            "started": v.start_ms >= 0,
                            "prev": self.rel(v.prev_producer_id, 0)[0], "next": self.rel(v.next_producer_id, 0)[0],
                            "client_tv": v.client_tv, "next_epoch": v.next_producer_epoch})
        return out


def _zero():
    return uuid.UUID(int=0)


def _scenario(side: Side, name: str) -> dict:
    """The whole TV2 conversation of one producer on one broker; every answer in a transcript."""
    topic, group, txn = f"{name}-t", f"{name}-g", f"{name}-id"
    side.ready(1, txn)
    side.ready(0, group)
    side.create(topic)
    side.create(f"{topic}-b")
    out = {}
    out["init"] = side.init(txn)
    pid, e = side.pid, side.epoch0
    # transaction 1: Produce v12 adds the partition, TxnOffsetCommit v5 adds the offsets, EndTxn v5 commits
    out["produce1"] = side.produce(txn, topic, 0, [b"c1-0", b"c1-1"], pid, e, 0)
    out["produce1b"] = side.produce(txn, topic, 0, [b"c1-2"], pid, e, 2)
    out["toc1"] = side.txn_offset_commit(txn, group, pid, e, topic, 3)
    out["verify_in"] = side.add_v4(5, txn, pid, e, topic, [0], True)
    out["end1"] = side.end(txn, pid, e, True)
    # the same EndTxn again: a retry (the epoch it names is one below the bumped one); it settles once the
    # transaction is complete on both (Kafka writes its markers after its answer)
    out["end1_retry"] = side.end(txn, pid, e, True)
    out["end1_opposite"] = side.end(txn, pid, e, False)
    # the old epoch is fenced everywhere
    out["produce_old_epoch"] = side.produce(txn, topic, 0, [b"zombie"], pid, e, 3)
    out["toc_old_epoch"] = side.txn_offset_commit(txn, group, pid, e, topic, 9)
    out["end_old_epoch_abort"] = side.end(txn, pid, e - 1 if e > 0 else e + 5, False)
    # transaction 2 (epoch + 1, sequences from 0), aborted
    out["produce2"] = side.produce(txn, topic, 0, [b"a-0", b"a-1"], pid, e + 1, 0)
    out["verify_unknown"] = side.add_v4(5, txn, pid, e + 1, topic, [0, 1], True)
    out["verify_other"] = side.add_v4(5, txn, pid, e + 1, f"{topic}-b", [0], True)
    out["verify_other_v4"] = side.add_v4(4, txn, pid, e + 1, f"{topic}-b", [0], True)
    out["verify_fenced"] = side.add_v4(5, txn, pid, e, topic, [0], True)
    out["add_unknown"] = side.add_v4(5, txn, pid, e + 1, topic, [0, 1], False)
    out["end2"] = side.end(txn, pid, e + 1, False)
    out["end2_retry_commit"] = side.end(txn, pid, e + 1, True)
    # an empty abort (nothing added) at the current epoch, then a commit of nothing
    out["end3_empty_abort"] = side.end(txn, pid, e + 2, False)
    out["end3_retry"] = side.end(txn, pid, e + 2, False)
    out["end4_empty_commit"] = side.end(txn, pid, e + 3, True)
    # transaction 4: AddPartitionsToTxn v5 (the leader's add), then a Produce v11 (no implicit add) that it covers
    out["add_v5"] = side.add_v4(5, txn, pid, e + 3, topic, [0], False)
    out["produce4_v11"] = side.produce(txn, topic, 0, [b"c4-0"], pid, e + 3, 0, version=11)
    out["produce4_v11_other"] = side.produce(txn, f"{topic}-none", 0, [b"x"], pid, e + 3, 0, version=11)
    # Produce v13 (topics by id): the implicit add as v12; an id no topic has
    out["produce4_v13"] = side.produce(txn, f"{topic}-b", 0, [b"c4-b"], pid, e + 3, 0, version=13)
    out["produce4_v13_unknown_id"] = side.produce(txn, topic, 0, [b"x"], pid, e + 3, 5, version=13,
                                                  topic_id=uuid.UUID(int=777))
    # TxnOffsetCommit v6 (topics by id, KIP-1319): adds the offsets too; an id no topic has
    out["toc4_v6"] = side.txn_offset_commit(txn, group, pid, e + 3, topic, 4, version=6)
    out["toc4_v6_unknown_id"] = side.txn_offset_commit(txn, group, pid, e + 3, topic, 4, version=6,
                                                       topic_id=uuid.UUID(int=12345))
    out["end4"] = side.end(txn, pid, e + 3, True)
    out["end4_settled"] = side.settle(txn)
    # the fenced epoch again, by Produce version (v11: the v1 form, v13: by topic id)
    for version in (11, 12, 13):
        out[f"produce_old_epoch_v{version}"] = side.produce(txn, topic, 0, [b"late"], pid, e + 3, 1, version=version)
    out["log_uncommitted"] = side.batches(topic, isolation=0)
    out["log_committed"] = side.batches(topic, isolation=1)
    out["log_b"] = side.batches(f"{topic}-b", isolation=1)
    out["offsets_log"] = side.group_log(group)
    out["txn_log"] = side.txn_log(txn)
    return out


def test_transactions_v2_wire_conversation(targets, topic_name):
    name = topic_name("tv2")
    answers = {}
    for broker, target in targets.items():
        side = Side(target)
        try:
            answers[broker] = _scenario(side, name)
        finally:
            side.close()
    assert_same(answers["kafka"], answers["kafkalog"], what="transactions v2 conversation",
                ignore=("offsets_log.hw", "offsets_log.lso"))
    # and what the conversation shows (so the comparison cannot pass on two equally broken answers)
    ours = answers["kafkalog"]
    assert ours["end1"] == ours["end1_retry"] == {"error_code": 0, "id": ("P", 1)}
    assert ours["produce1"] == 0 and ours["toc1"] == [(f"{name}-t", 0)] and ours["toc4_v6"] == [(f"{name}-t", 0)]
    assert ours["produce_old_epoch"] == 47 and ours["toc_old_epoch"] == [(f"{name}-t", 47)]
    assert ours["toc4_v6_unknown_id"][0][1] == 100  # UNKNOWN_TOPIC_ID
    assert ours["produce4_v13"] == 0 and ours["produce4_v13_unknown_id"] == 100
    assert [v for b in ours["log_b"][1] for v in (b["values"] or [])] == [b"c4-b"]
    assert [b["id"] for b in ours["log_uncommitted"][1] if b["control"]] == [("P", 1), ("P", 2), ("P", 4)]
