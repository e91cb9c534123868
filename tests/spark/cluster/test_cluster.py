"""A Spark standalone cluster whose executors run on two other test hosts (network namespaces) and cannot see the
data dir, reading and writing kafkalog through its broker with Spark's own Kafka connector, its options unchanged.

Each test's data goes through the broker (confluent-kafka on the broker host), Spark's answers are compared record
for record with what was produced or with the engine's own reading of the data dir, and the broker's metrics show
what the executors did on the wire.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin as kadmin
import pytest

import kafkalog

from .conftest import PKG_ROOT, SCRAM_PASSWORD, SCRAM_USER, ClusterError

T0 = 1_700_000_000_000
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";'}
SASL_RDKAFKA = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD}


def create(bootstrap, topic, partitions, extra=None):
    admin = kadmin.AdminClient({"bootstrap.servers": bootstrap, **(extra or {})})
    admin.create_topics([kadmin.NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(bootstrap, topic, partitions, per_partition, *, start=0, extra=None, value_size=0):
    """Append ``per_partition`` records to each partition through the broker: key k<i> (None every 7th), value
    "<p>:<i>" (padded to ``value_size``), timestamp T0 + i*1000, headers on every 3rd record. Returns the expected
    rows in driver.py's form: [key, value, topic, partition, offset, ts, 0, headers]."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                  "enable.idempotence": True, **(extra or {})})
    rows = []
    for part in range(partitions):
        for i in range(start, start + per_partition):
            key = None if i % 7 == 0 else f"k{i}"
            value = f"{part}:{i}".ljust(value_size, ".")
            headers = [("h", str(i).encode()), ("n", None)] if i % 3 == 0 else None
            p.produce(topic, value=value.encode(), key=None if key is None else key.encode(), partition=part,
                      timestamp=T0 + i * 1000, headers=headers)
            rows.append([key, value, topic, part, i, T0 + i * 1000, 0,
                         None if headers is None else [["h", str(i)], ["n", None]]])
        p.poll(0)
    assert p.flush(60) == 0
    return rows


def without_headers(rows):
    return [r[:7] for r in rows]


def engine_rows(data: Path, topic: str) -> list:
    """The topic as the engine reads the data dir (a read-only view beside the running broker)."""
    out = []
    with kafkalog.LogStore(data, read_only=True) as store:
        for p in range(store.partitions_for(topic)):
            for r in store.log(topic, p).records():
                out.append([None if r.key is None else r.key.decode(), r.value.decode(), topic, p, r.offset,
                            [[k, None if v is None else v.decode()] for k, v in r.headers] or None])
    return out


def batch_files(out: Path) -> dict[int, list]:
    return {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in out.glob("batch-*.json")}


def test_the_executors_run_on_two_other_hosts_that_cannot_see_the_data_dir(cluster, broker, net):
    assert cluster.job("executor_hosts") == [net.ip(1), net.ip(2)]
    assert broker.data.is_dir()  # here, on the broker host
    assert cluster.job("path_visible", path=str(broker.data)) == [[net.ip(1), False], [net.ip(2), False]]


def test_a_batch_read_seeks_by_time_through_the_broker(cluster, broker):
    create(broker.bootstrap, "seek", 2)
    rows = produce(broker.bootstrap, "seek", 2, 300)
    before = broker.metrics()

    # the whole topic, headers included, exactly as produced
    assert cluster.job("kafka_read", bootstrap=broker.bootstrap, topic="seek", headers=True) == rows
    # startingTimestamp: ListOffsets by time on the wire, from the first record at or after it
    t = T0 + 123_500
    got = cluster.job("kafka_read", bootstrap=broker.bootstrap, topic="seek",
                      options={"startingTimestamp": str(t), "endingOffsets": "latest"})
    assert got == without_headers([r for r in rows if r[5] >= t])
    assert got[0][4] == 124
    # per partition, and an ending timestamp
    by_ts = json.dumps({"seek": {"0": T0 + 10_000, "1": T0 + 250_000}})
    got = cluster.job("kafka_read", bootstrap=broker.bootstrap, topic="seek",
                      options={"startingOffsetsByTimestamp": by_ts,
                               "endingOffsetsByTimestamp": json.dumps({"seek": {"0": T0 + 20_000,
                                                                                  "1": T0 + 260_000}})})
    assert got == without_headers([r for r in rows if (r[3] == 0 and 10 <= r[4] < 20)
                                   or (r[3] == 1 and 250 <= r[4] < 260)])
    after = broker.metrics()
    key = 'kafkalog_requests_total{api="ListOffsets"}'
    assert after.get(key, 0) - before.get(key, 0) >= 2  # the seeks were the broker's, by time


@pytest.mark.slow  # the default suite's 20-minute budget on 2 cores; run with -m slow
def test_a_streaming_read_restarts_from_its_checkpoint_after_kill_9_and_loses_and_repeats_nothing(cluster, broker):
    create(broker.bootstrap, "stream", 2)
    rows = produce(broker.bootstrap, "stream", 2, 150)
    ckpt, out = cluster.hidden / "ckpt-stream", cluster.hidden / "out-stream"
    opts = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "40"}
    done = cluster.job("kafka_stream_to_files", bootstrap=broker.bootstrap, topic="stream", checkpoint=str(ckpt),
                       out_dir=str(out), options=opts)
    assert done >= 8  # 300 records, 40 a batch
    rows += produce(broker.bootstrap, "stream", 2, 150, start=150)

    # the second run is killed (the driver, kill -9) after a few of its micro-batches
    first = len(batch_files(out))
    cluster.send("kafka_stream_to_files", bootstrap=broker.bootstrap, topic="stream", checkpoint=str(ckpt),
                 out_dir=str(out), options=opts, trigger="2 seconds", run_seconds=300)
    deadline = time.monotonic() + 120
    while len(batch_files(out)) < first + 2:
        assert time.monotonic() < deadline, "the second run wrote no batch"
        time.sleep(0.2)
    cluster.kill_driver()
    killed_at = len(batch_files(out))
    assert killed_at < first + 8, "the run finished before it was killed: the test proves nothing"

    # a new driver, the same checkpoint: the rest, nothing twice
    cluster.job("kafka_stream_to_files", bootstrap=broker.bootstrap, topic="stream", checkpoint=str(ckpt),
                out_dir=str(out), options=opts)
    seen: dict[tuple, int] = {}
    got = []
    for batch, brows in sorted(batch_files(out).items()):
        for r in brows:
            assert (r[3], r[4]) not in seen, f"offset {r[3]}-{r[4]} in batches {seen[(r[3], r[4])]} and {batch}"
            seen[(r[3], r[4])] = batch
            got.append(r)
    assert sorted(got, key=lambda r: (r[3], r[4])) == sorted(rows, key=lambda r: (r[3], r[4]))


def test_delete_records_between_runs_fails_the_query_or_is_skipped_per_failOnDataLoss(cluster, broker):
    create(broker.bootstrap, "gone", 1)
    rows = produce(broker.bootstrap, "gone", 1, 100)
    base = cluster.hidden
    for name, fail in (("strict", "true"), ("lenient", "false")):
        n = cluster.job("kafka_stream_to_files", bootstrap=broker.bootstrap, topic="gone",
                        checkpoint=str(base / f"ckpt-{name}"), out_dir=str(base / f"out-{name}"),
                        options={"startingOffsets": "earliest", "failOnDataLoss": fail})
        assert n >= 1
    rows += produce(broker.bootstrap, "gone", 1, 100, start=100)
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = confluent_kafka.TopicPartition("gone", 0, 150)
    deleted = admin.delete_records([tp])[tp].result(30)
    assert deleted.low_watermark == 150

    got = cluster.call("kafka_stream_to_files", bootstrap=broker.bootstrap, topic="gone",
                       checkpoint=str(base / "ckpt-strict"), out_dir=str(base / "out-strict"),
                       options={"startingOffsets": "earliest", "failOnDataLoss": "true"})
    assert "error" in got, got
    msg = got["error"]["message"]
    assert "lost" in msg.lower() and "failOnDataLoss" in msg, msg[:2000]
    strict = [r for b in batch_files(base / "out-strict").values() for r in b]
    assert sorted(r[4] for r in strict) == list(range(100))  # nothing after the loss was taken as read

    cluster.job("kafka_stream_to_files", bootstrap=broker.bootstrap, topic="gone",
                checkpoint=str(base / "ckpt-lenient"), out_dir=str(base / "out-lenient"),
                options={"startingOffsets": "earliest", "failOnDataLoss": "false"})
    lenient = sorted((r for b in batch_files(base / "out-lenient").values() for r in b), key=lambda r: r[4])
    assert [r[4] for r in lenient] == list(range(100)) + list(range(150, 200))
    assert lenient == [r for r in rows if r[4] < 100 or r[4] >= 150]


def test_batch_and_streaming_writes_through_the_broker_read_back_exactly(cluster, broker):
    create(broker.bootstrap, "written", 3)
    data = [[None if i % 5 == 0 else f"key-{i}", f"value-{i}", i % 3,
             [["a", f"{i}"], ["b", None]] if i % 4 == 0 else None] for i in range(600)]
    assert cluster.job("kafka_write", bootstrap=broker.bootstrap, topic="written", rows=data) == 600
    got = engine_rows(broker.data, "written")
    assert sorted((r[3], r[1], r[0], r[5]) for r in got) == sorted((d[2], d[1], d[0], d[3]) for d in data)
    for p in range(3):  # each partition dense from 0
        assert [r[4] for r in got if r[3] == p] == list(range(200))

    # a streaming copy, upper-cased, keeping partitions; a second availableNow run adds only what is new
    create(broker.bootstrap, "copy", 3)
    ckpt = cluster.hidden / "ckpt-copy"
    n = cluster.job("kafka_stream_copy", bootstrap=broker.bootstrap, src="written", dst="copy", checkpoint=str(ckpt),
                    options={"startingOffsets": "earliest", "maxOffsetsPerTrigger": "250"})
    assert n == 600
    more = [[f"key-{i}", f"value-{i}", i % 3, None] for i in range(600, 660)]
    cluster.job("kafka_write", bootstrap=broker.bootstrap, topic="written", rows=more)
    n = cluster.job("kafka_stream_copy", bootstrap=broker.bootstrap, src="written", dst="copy", checkpoint=str(ckpt),
                    options={"startingOffsets": "earliest"})
    assert n == 60
    src = engine_rows(broker.data, "written")
    dst = engine_rows(broker.data, "copy")
    for p in range(3):
        assert [(r[0], r[1].upper()) for r in src if r[3] == p] == [(r[0], r[1]) for r in dst if r[3] == p]


@pytest.mark.slow  # the default suite's 20-minute budget on 2 cores; run with -m slow
def test_reads_and_writes_over_sasl_scram(cluster, sasl_broker):
    b = sasl_broker.bootstrap
    create(b, "secure", 2, SASL_RDKAFKA)
    rows = produce(b, "secure", 2, 100, extra=SASL_RDKAFKA)
    assert cluster.job("kafka_read", bootstrap=b, topic="secure", security=SASL, headers=True) == rows
    assert cluster.job("kafka_read", bootstrap=b, topic="secure", security=SASL,
                       options={"startingTimestamp": str(T0 + 90_000)}) == without_headers(
        [r for r in rows if r[4] >= 90])
    data = [[f"k{i}", f"v{i}", i % 2, None] for i in range(50)]
    cluster.job("kafka_write", bootstrap=b, topic="secure", rows=data, security=SASL)
    got = engine_rows(sasl_broker.data, "secure")
    assert sorted((r[3], r[0], r[1]) for r in got if r[4] >= 100) == sorted((d[2], d[0], d[1]) for d in data)
    # a streaming read and write over SASL: the copy holds every record, partition by partition, in order
    create(b, "secure-copy", 2, SASL_RDKAFKA)
    n = cluster.job("kafka_stream_copy", bootstrap=b, src="secure", dst="secure-copy", security=SASL,
                    checkpoint=str(cluster.hidden / "ckpt-secure"), options={"startingOffsets": "earliest"})
    assert n == 250
    dst = engine_rows(sasl_broker.data, "secure-copy")
    for p in range(2):
        assert [(r[0], r[1].upper()) for r in got if r[3] == p] == [(r[0], r[1]) for r in dst if r[3] == p]

    wrong = dict(SASL, **{"sasl.jaas.config": SASL["sasl.jaas.config"].replace(SCRAM_PASSWORD, "not-it")})
    got = cluster.call("kafka_count", bootstrap=b, topic="secure", security=wrong, timeout=180)
    assert "error" in got and "Authentication failed" in got["error"]["message"], got
    # and without SASL at all the broker never answers a request: the read fails, it does not hang
    got = cluster.call("kafka_count", bootstrap=b, topic="secure",
                       options={"kafka.default.api.timeout.ms": "8000", "kafka.request.timeout.ms": "4000"},
                       timeout=180)
    assert "error" in got, got


def quotas(bootstrap, *args):
    """`kafkalog quotas` (AlterClientQuotas on the wire), run from outside the repository."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PKG_ROOT), "PYTHONSAFEPATH": "1"}
    r = subprocess.run([sys.executable, "-m", "kafkalog", "quotas", "--bootstrap-server", bootstrap, *args],
                       capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.slow  # the default suite's 20-minute budget on 2 cores; run with -m slow
def test_the_executors_use_fetch_sessions_and_are_held_to_the_consumer_quota(cluster, broker):
    create(broker.bootstrap, "quota", 2)
    produce(broker.bootstrap, "quota", 2, 1500, value_size=1000)  # 1.5 MB a partition, one consumer each
    # AlterClientQuotas on the wire: 100 KB/s lets a client take about 1 MB (the 10 s window) before it is throttled
    quotas(broker.bootstrap, "--default", "--consumer-byte-rate", "100K")
    try:
        before = broker.metrics()
        assert cluster.job("kafka_count", bootstrap=broker.bootstrap, topic="quota") == 3000
        m = broker.metrics()
    finally:
        quotas(broker.bootstrap, "--default", "--consumer-byte-rate", "none")

    def total(metrics, prefix, having=""):
        return sum(v for k, v in metrics.items() if k.startswith(prefix) and having in k)
    # the executors' consumers (client ids consumer-spark-kafka-relation-...-executor-N) were throttled
    name = "kafkalog_quota_throttle_time_ms_total"
    assert total(m, name, "spark-kafka-") - total(before, name, "spark-kafka-") > 0, \
        {k: v for k, v in m.items() if "quota" in k}
    # and their fetches ran in incremental fetch sessions (KIP-227), still cached for their consumers
    assert m["kafkalog_fetch_sessions"] >= 1, {k: v for k, v in m.items() if "fetch_session" in k}
    assert m["kafkalog_fetch_session_partitions_cached"] >= 1


@pytest.mark.slow  # the default suite's 20-minute budget on 2 cores; run with -m slow
def test_format_kafkalog_on_executors_without_the_data_dir_fails_with_one_clear_message(cluster, broker):
    create(broker.bootstrap, "local-only", 2)
    produce(broker.bootstrap, "local-only", 2, 10)
    for job, kw in (("kafkalog_read", {"topic": "local-only"}), ("kafkalog_write", {"topic": "local-only", "n": 20})):
        got = cluster.call(job, path=str(broker.data), timeout=180, **kw)
        assert "error" in got, got
        err = got["error"]
        assert "kafka.bootstrap.servers" in err["message"] and "From one machine to a cluster" in err["message"], \
            err["message"][:3000]
        assert str(broker.data) in err["message"]
        assert err["java_frames"] == 0, err["message"][:3000]
    # nothing was created on the broker host's data dir by the failed write, and the topic is untouched
    assert len(engine_rows(broker.data, "local-only")) == 20
    with pytest.raises(ClusterError):
        cluster.job("kafkalog_read", path=str(broker.data), topic="local-only")
