"""A Java 4.4 consumer with ``group.protocol=consumer`` resumes after a broker kill -9 as it does on Apache Kafka 4.4
(kip848_resume.py): the broker is killed and started again on the same data dir and port, and what the consumer
went through is counted from its own log, until it read the records produced after the restart and had a
heartbeat answered at an epoch > 0 (the Java consumer reads on while its coordinator is away: a group lost at the
restart shows only in the heartbeats): its ConsumerGroupHeartbeat round trips, error answers and re-joins (epoch
0), and its rebalance callbacks (revoked, lost, assigned). kafkalog must need no more of each than Kafka, and answer
the first heartbeat after the restart as Kafka does (no error, the member's epoch from before the kill, the
heartbeat interval). Counts, not times: the times are measured by ``python -m tests.compat.kip848_resume``.

kafkalog stays down 6 s (longer than the 5 s heartbeat interval), as Kafka's restart takes: a heartbeat comes due
while the coordinator is away on both brokers, so the consumer re-discovers it and sends a full heartbeat on both.

Slow: two Kafka starts (about 8 s each on 2 cores), two kafkalog starts, one consumer JVM per broker (about
40 s in all).
"""

from __future__ import annotations

import pytest

from tests.compat.kip848_resume import resume_run
from tests.compat.lab import KafkaBroker, KafkalogServer

pytestmark = pytest.mark.slow
LAB_TEST_DEADLINE_S = 300


def _run(cls, tmp_path, down_s, instance_id):
    server = cls()
    server.start(tmp_path / cls.name)
    try:
        return resume_run(server, tmp_path, cls.name, down_s=down_s, instance_id=instance_id)
    finally:
        server.stop()


@pytest.mark.parametrize("instance_id", [None, "static"])
def test_a_kip848_consumer_resumes_after_a_broker_kill9_as_on_kafka(tmp_path, instance_id):
    kafka = _run(KafkaBroker, tmp_path, 0.0, instance_id)
    kafkalog = _run(KafkalogServer, tmp_path, 6.0, instance_id)
    seen = f"\nkafka: {kafka}\nkafkalog: {kafkalog}"
    assert kafkalog["rejoins"] <= kafka["rejoins"], seen
    assert len(kafkalog["errors"]) <= len(kafka["errors"]), seen
    assert len(kafkalog["callbacks"]) <= len(kafka["callbacks"]), seen
    assert kafkalog["requests"] <= max(kafka["requests"], 1), seen
    k, kl = kafka["first_answer"], kafkalog["first_answer"]
    if k is not None and kl is not None:  # the first heartbeat answered after the restart
        assert (kl["error_code"], kl["interval_ms"]) == (k["error_code"], k["interval_ms"]), seen
        assert kl["epoch"] == kafkalog["epoch_before"] and k["epoch"] == kafka["epoch_before"], seen
