"""Fault injection (broker/faults.py) across a restart: the rules and stalls end when the broker stops, as they end
with a ``kafkalog serve`` process (kafkalog.testing.LocalBroker restarts a broker either way; tests/plugin runs its
faults as real clients see them)."""

from __future__ import annotations

from kafkalog.broker import Broker
from kafkalog.structs import TopicPartition

from .conftest import BROKER_CONFIG
from .wire import Wire, batch


def test_a_restart_ends_the_faults(tmp_path):
    b = Broker(tmp_path / "data", listen="127.0.0.1:0", config=BROKER_CONFIG).start()
    try:
        with Wire(b.port) as w:
            w.create_topic("t", partitions=2)
            faults = b.faults
            faults.fail_produce("t", "NOT_ENOUGH_REPLICAS", count=3)
            assert w.produce("t", 0, batch([b"refused"]))["error_code"] == 19
            faults.stall("t", 1)
            held = Wire(b.port)
            held.send(0, 7, {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 1, "records": batch([b"held"])}]}]})
            waiting = faults._stalls[TopicPartition("t", 1)]
            for _ in range(500):  # the request reaches the broker's loop and waits there
                if waiting:
                    break
                w.call(18, 0, {})  # ApiVersions: a round trip on the loop
            assert len(waiting) == 1 and faults.pending() == 2 and faults.injected == 1
        port = b.port
        b.restart()
        assert b.port == port and b.faults is faults
        assert (faults.pending(), faults.injected, faults.active, faults.stalled("t", 1)) == (0, 0, False, False)
        assert waiting[0].done()  # the held Produce's handler ended with its connection, nothing waits
        assert held.recv_frame() is None  # closed by the stop, unanswered
        held.close()
        with Wire(b.port) as w:
            for p in (0, 1):
                pr = w.produce("t", p, batch([b"after"]))
                assert (pr["error_code"], pr["base_offset"]) == (0, 0)  # nothing refused or held was appended
    finally:
        b.stop()
