"""KIP-227 over the wire with the one real client that uses sessions (kafka-python): after the first fetch every
fetch is incremental (a session id and epoch >= 1), idle rounds carry no partitions, and every record still arrives
exactly once, with appends between rounds (issue 5, item 1)."""

from __future__ import annotations

import time

import pytest

from kafkalog.broker import Broker

from .wire import Wire, batch
from .wiretap import WireTap

kafka = pytest.importorskip("kafka")

PARTITIONS = 40


def test_kafka_python_fetches_incrementally_and_gets_every_record(tmp_path):
    tap = WireTap()
    b = Broker(tmp_path / "d", listen="127.0.0.1:0",
               config={"advertised.listeners": f"127.0.0.1:{tap.port}", "group.initial.rebalance.delay.ms": 0})
    b.start()
    tap.start(b.port)
    try:
        with Wire(b.port) as w:
            assert w.create_topic("many", PARTITIONS)["error_code"] == 0
            for p in range(PARTITIONS):
                w.produce("many", p, batch([b"%d-%d" % (p, i) for i in range(5)]))
        c = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{tap.port}", auto_offset_reset="earliest",
                                enable_incremental_fetch_sessions=True, fetch_max_wait_ms=100)
        try:
            c.assign([kafka.TopicPartition("many", p) for p in range(PARTITIONS)])
            got = []
            expected = {b"%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(5)}

            def drain(n, timeout=30):
                deadline = time.monotonic() + timeout
                while len(got) < n and time.monotonic() < deadline:
                    for recs in c.poll(timeout_ms=200).values():
                        got.extend(r.value for r in recs)
            drain(len(expected))
            # idle rounds, then new records on a few partitions between rounds
            for _ in range(5):
                c.poll(timeout_ms=150)
            with Wire(b.port) as w:
                for p in (3, 17, 31):
                    w.produce("many", p, batch([b"late-%d" % p]))
            expected |= {b"late-%d" % p for p in (3, 17, 31)}
            drain(len(expected))
            assert sorted(got) == sorted(expected)  # every record, none twice
        finally:
            c.close()
        fetches = tap.fetches()
        assert len(fetches) > 5
        first, rest = fetches[0], fetches[1:]
        assert (first["session_id"], first["session_epoch"]) == (0, 0)  # "create"
        assert sum(len(t["partitions"]) for t in first["topics"]) == PARTITIONS
        # after the first, every fetch is incremental: the session's id and the next epoch each time
        sid = rest[0]["session_id"]
        assert sid != 0
        assert [f["session_id"] for f in rest] == [sid] * len(rest)
        assert [f["session_epoch"] for f in rest] == list(range(1, len(rest) + 1))
        # incremental requests carry only changed partitions (fetch offsets that moved): idle rounds list none
        sizes = [sum(len(t["partitions"]) for t in f["topics"]) for f in rest]
        assert sizes.count(0) >= len(rest) // 2, sizes
        assert b.services.fetch_sessions.num_sessions == 1
    finally:
        b.stop()
        tap.close()


@pytest.mark.parametrize("version", [11, 17])
def test_a_fetch_with_no_partitions_is_answered_at_once(tmp_path, version):
    """Kafka answers a fetch with nothing to wait for at once (ReplicaManager: no partitions), whatever its
    max_wait_ms: a sessionless one, a new session's first request and the session close every Java consumer sends
    on close (its id, epoch -1, no topics). With a 10-minute max_wait_ms, a broker that waits would leave the
    socket's timeout (10 s, a failure guard only) to fire."""
    b = Broker(tmp_path / "d", listen="127.0.0.1:0")
    b.start()
    try:
        with Wire(b.port) as w:
            def fetch(session_id, epoch):
                return w.call(1, version, {"replica_id": -1, "max_wait_ms": 600_000, "min_bytes": 1,
                                           "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
                                           "session_epoch": epoch, "topics": [], "forgotten_topics_data": [],
                                           "rack_id": ""})
            r = fetch(0, -1)  # sessionless
            assert r["error_code"] == 0 and r["responses"] == [], r
            r = fetch(0, 0)  # a new session without partitions
            assert r["error_code"] == 0, r
            if r["session_id"]:
                r = fetch(r["session_id"], -1)  # the session's close
                assert r["error_code"] == 0 and r["responses"] == [], r
    finally:
        b.stop()
