#!/usr/bin/env python3
"""The PySpark data source against its ceiling and floor, in one run on one Spark session (local[2]).

    python bench/spark_source.py [--records 2000000] [--repeat 5] [--quick] [--dir DIR]
                                 [--no-kafka | --kafka] [--no-apache-kafka] [--kafka-heap 512m]

Reads N records (16-byte key, 100-byte value, 2 partitions) into ``count()`` and into a groupBy aggregation
(``groupBy(partition).agg(count, sum(length(value)), max(offset))``) through:

  kafkalog        ``spark.read.format("kafkalog")`` over a data dir the engine wrote (page cache)
  arrow-memory    a Python data source of the same schema yielding pre-built Arrow record batches of 65,536 rows
                  from memory: the ceiling of any Python data source on this machine
  spark.range     the same columns computed by the JVM from ``spark.range`` (Spark's own floor; count() prunes)

Goal: kafkalog >= 0.7x the arrow-memory source's records/s, for both queries. Then streaming throughput:
``readStream.format("kafkalog")`` with maxOffsetsPerTrigger unset, availableNow, into the noop sink (one
micro-batch) and into the kafkalog sink (exactly-once, read back to check), plus a rate-limited run for the
per-micro-batch cost.

Each row: one warm-up run discarded, then R runs interleaved across the sources; best of R (CPU-bound) and the
median are printed; the goal uses best of R. Benchmarks are not tests: the exit status never depends on PASS/MISS.

Spark's own Kafka source (issue 13; on by default, ``--no-kafka`` leaves it out, ``--kafka`` runs only it): the same
N records into ``count()`` through

  format("kafkalog")          by path, as above (the engine's segments, read-only beside the running broker)
  format("kafka") via kafkalog serve
                              ``python -m kafkalog serve`` on the very data dir the engine wrote (tests/compat/lab.py's
                              KafkalogServer, imported by path), Spark's Kafka connector of pyspark's exact version
                              (``.ci/lab-spark``: spark-sql-kafka-0-10, its token provider, kafka-clients,
                              commons-pool2, given with ``spark.jars`` when the session is built)
  format("kafka") via Apache Kafka
                              Kafka 4.4.0 (lab.KafkaBroker: one KRaft node, -Xmx/-Xms ``--kafka-heap``, default
                              512m), loaded with the same records (same partitions, keys, values and timestamps) by a
                              confluent-kafka producer: linger.ms 50, batch.size 1,000,000, batch.num.messages 1000
                              (the engine's batches hold 1000 records too), no compression, acks=1, partition given,
                              one request in flight (a retried batch cannot land after the next one)

Topic t has retention.ms -1 on both sides (T0 is in 2023: time-based retention would delete it mid-run). Before
timing, both brokers must report the same log start/end offsets (0 and N/2 per partition) and the same first and
last record of each partition (checked again after the runs). Then: warm-up discarded, R runs interleaved across the
three sources, every count checked against N (a wrong count or a failed query is a FAILED run, printed loudly; the
exit status is then 1). The same three as availableNow streams (``startingOffsets`` earliest, maxOffsetsPerTrigger
unset, into the noop sink, a fresh checkpoint per run; the warm-up stream reads the last 2,000 records of each
partition). Each run also measures the CPU seconds of the broker it goes through and of Spark (its JVM and its
Python workers) from /proc/<pid>/stat. Goals: via kafkalog serve / via Kafka >= 1.0x records/s (kafkalog's broker is
not the bottleneck compared with Kafka), for count() and for the stream; format("kafkalog") / via kafkalog serve is
information (what the read by path gains). ``--no-apache-kafka`` keeps the kafkalog serve rows only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kafkalog  # noqa: E402

T0 = 1_700_000_000_000
# T0 is years in the past: time-based retention (7 days by default, checked 30 s to 5 min after a broker starts)
# would delete every segment, in kafkalog serve and in Kafka alike. The topic keeps its records forever.
TOPIC_CONFIG = {"retention.ms": "-1"}
KEY_BYTES, VALUE_BYTES = 16, 100
BATCH_RECORDS = 1000


def batches(n: int):
    """The bench's records, batch by batch: (partition, values, keys, timestamps), 1000 records a batch, n // 2 per
    partition (the same bytes on every call: the values come from a seeded generator)."""
    rng = np.random.default_rng(7)
    per = n // 2
    for p in range(2):
        for lo in range(0, per, BATCH_RECORDS):
            m = min(BATCH_RECORDS, per - lo)
            blob = rng.bytes(VALUE_BYTES * m)
            values = [blob[i * VALUE_BYTES:(i + 1) * VALUE_BYTES] for i in range(m)]
            keys = [(lo + i).to_bytes(KEY_BYTES, "big") for i in range(m)]
            yield p, values, keys, [T0 + lo + i for i in range(m)]


def write_data(path: Path, n: int) -> float:
    start = time.perf_counter()
    with kafkalog.LogStore(path, exclusive=True, maintenance=False) as store:
        store.create_topic("t", partitions=2, config=TOPIC_CONFIG)
        logs = [store.log("t", p) for p in range(2)]
        for p, values, keys, stamps in batches(n):
            logs[p].append_batch(values, keys, stamps)
    return time.perf_counter() - start


def arrow_memory_source(rows_per_partition: int):
    """A Python data source of Spark's Kafka schema whose read() yields pre-built 65,536-row record batches."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from kafkalog.spark.source import kafka_schema

    class ArrowMemoryReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(p) for p in range(2)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa
            from pyspark.sql.pandas.types import to_arrow_schema

            schema = to_arrow_schema(kafka_schema(False), timezone="UTC")
            n = 65536
            rng = np.random.default_rng(partition.value)

            def binary(width):
                offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
                return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                             pa.py_buffer(rng.bytes(n * width))])

            topic = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32)),
                                                           pa.py_buffer(b"t" * n)])
            offsets = np.arange(n, dtype=np.int64)
            template = pa.RecordBatch.from_arrays([
                binary(KEY_BYTES), binary(VALUE_BYTES), topic,
                pa.array(np.full(n, partition.value, dtype=np.int32)), pa.array(offsets),
                pa.array((T0 + offsets) * 1000).view(schema.field("timestamp").type),
                pa.array(np.zeros(n, dtype=np.int32))], schema=schema)
            left = rows_per_partition
            while left > 0:
                yield template if left >= n else template.slice(0, left)
                left -= n

    class ArrowMemorySource(DataSource):
        @classmethod
        def name(cls):
            return "arrow_memory"

        def schema(self):
            return kafka_schema(False)

        def reader(self, schema):
            return ArrowMemoryReader()

    return ArrowMemorySource


def session(log_dir: Path, jars=()):
    from pyspark.sql import SparkSession

    (log_dir / "log4j2.properties").write_text(
        "rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\nappender.console.type = Console\n"
        "appender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %p %c{1}: %m%n\n")
    os.environ.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                      SPARK_LOCAL_IP="127.0.0.1", PYTHONSAFEPATH="1",
                      PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                              if os.environ.get("PYTHONPATH") else ""))
    builder = SparkSession.builder
    if jars:  # Spark's Kafka connector: on the class path from the start (spark.jars is read when the JVM starts)
        builder = builder.config("spark.jars", ",".join(map(str, jars)))
    spark = (builder.master("local[2]").appName("kafkalog-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "2g")
             .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log_dir}/log4j2.properties")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def frames(spark, data: Path, n: int):
    import kafkalog.spark

    kafkalog.spark.register(spark)
    spark.dataSource.register(arrow_memory_source(n // 2))
    kl = spark.read.format("kafkalog").option("subscribe", "t").load(str(data))
    mem = spark.read.format("arrow_memory").load()
    rng = spark.range(0, n, 1, 2).selectExpr(
        f"cast(lpad(cast(id as string), {KEY_BYTES}, '0') as binary) as key",
        f"cast(repeat('x', {VALUE_BYTES}) as binary) as value", "'t' as topic", "cast(id % 2 as int) as partition",
        "id as offset", f"timestamp_millis({T0} + id) as timestamp", "0 as timestampType")
    return {"kafkalog": kl, "arrow-memory": mem, "spark.range": rng}


def q_count(df):
    return df.count()


def q_groupby(df):
    from pyspark.sql import functions as F

    aggs = (F.count("*"), F.sum(F.length("value")), F.max("offset"))
    return sorted(tuple(r) for r in df.groupBy("partition").agg(*aggs).collect())


def measure(frames_by_name: dict, query, repeat: int) -> dict:
    times = {name: [] for name in frames_by_name}
    answers = {}
    for name, df in frames_by_name.items():  # warm-up, discarded
        answers[name] = query(df)
    for _ in range(repeat):
        for name, df in frames_by_name.items():
            start = time.perf_counter()
            query(df)
            times[name].append(time.perf_counter() - start)
    return {"times": times, "answers": answers}


def stream_run(spark, data: Path, ckpt: Path, sink: str, max_offsets: int | None = None, topic: str = "t"):
    """One availableNow query: (wall seconds from start() to termination, rows, micro-batches, seconds spent in
    the micro-batches' triggers)."""
    reader = spark.readStream.format("kafkalog").option("subscribe", topic).option("startingOffsets", "earliest")
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    df = reader.load(str(data))
    if sink == "noop":
        writer = df.writeStream.format("noop")
    else:
        writer = df.selectExpr("key", "value").writeStream.format("kafkalog").option("path", str(data)) \
            .option("topic", "copy")
    writer = writer.option("checkpointLocation", str(ckpt))
    start = time.perf_counter()
    q = writer.trigger(availableNow=True).start()
    q.awaitTermination(1800)
    elapsed = time.perf_counter() - start
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    triggers = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return elapsed, rows, len(progress), triggers


# ------------------------------------------------------------------------ Spark's Kafka source (issue 13)

TOPIC = "t"


# the lab's import by path and its "not here" error are the benchmarks' harness's, shared
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Unavailable, compat_lab  # noqa: E402


def spark_kafka_jars(version: str) -> list[Path]:
    """Spark's Kafka connector for pyspark ``version`` (.ci/lab-spark fetches it from Maven Central once)."""
    script = ROOT / ".ci" / "lab-spark"
    if not script.is_file():
        raise Unavailable(f"{script} is missing (it fetches spark-sql-kafka-0-10_2.13 {version})")
    r = subprocess.run(["bash", str(script), version], capture_output=True, text=True, timeout=900)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise Unavailable(f".ci/lab-spark {version} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    jars = sorted(Path(lines[-1]).glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka-0-10") for j in jars):
        raise Unavailable(f"no spark-sql-kafka-0-10 jar in {lines[-1]}")
    return jars


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # fields[0] is field 3 (state): utime is 14, stime 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spark_jvm_pid(spark) -> int:
    """The pid of the Spark driver JVM (pyspark's gateway process; spark-submit execs java)."""
    pid = spark.sparkContext._gateway.proc.pid
    with open(f"/proc/{pid}/comm") as f:
        if f.read().strip() == "java":
            return pid
    import psutil
    for child in psutil.Process(pid).children(recursive=True):
        if child.name() == "java":
            return child.pid
    raise RuntimeError(f"no java process under pyspark's gateway pid {pid}")


def tree_cpu(pid: int) -> dict:
    """{pid: CPU seconds} of a process and its descendants (Spark's JVM and its Python daemon and workers)."""
    import psutil
    out = {}
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for proc in procs:
        try:
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return out


def tree_cpu_delta(before: dict, after: dict) -> float:
    # a process that appeared during the run counts whole; one that ended during it is lost (Spark reuses its
    # Python workers, so few do)
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def load_kafka(bootstrap: str, n: int) -> float:
    """Create topic t (2 partitions, retention.ms -1 as in the engine's data dir) on Kafka and produce the bench's
    records into it, each to its partition, with its key and timestamp; seconds until flush() returns."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 4})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1, config=TOPIC_CONFIG)],
                        operation_timeout=30, request_timeout=30)[TOPIC].result(timeout=60)
    deadline = time.monotonic() + 60
    while True:  # until both partitions have their leader (a produce before that is retried, out of order)
        parts = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        if len(parts) == 2 and all(pm.leader >= 0 and pm.error is None for pm in parts.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka's topic {TOPIC} has no leaders after 60 s: {parts}")
        time.sleep(0.1)
    # acks=1 without idempotence: one request in flight per connection, so a retried batch cannot land after the
    # next one (Kafka would then hold the records in another order than the engine's log)
    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 4,
                         "linger.ms": 50, "batch.size": 1_000_000, "batch.num.messages": BATCH_RECORDS,
                         "compression.type": "none", "acks": 1, "enable.idempotence": False,
                         "max.in.flight.requests.per.connection": 1,
                         "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 512 * 1024})
    # the producer's own metadata first: records produced while it has not yet mapped the partitions' leader to a
    # broker wait apart and were seen to land after the next batch ("new leader-1 not found in cache")
    producer.list_topics(TOPIC, timeout=30)
    start = time.perf_counter()
    produce = producer.produce
    for p, values, keys, stamps in batches(n):
        for value, key, ts in zip(values, keys, stamps):
            while True:
                try:
                    produce(TOPIC, value, key, partition=p, timestamp=ts)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(300)
    if left:
        raise RuntimeError(f"{left} records still unacknowledged by Kafka after flush(300)")
    return time.perf_counter() - start


def broker_view(bootstrap: str, per: int) -> dict:
    """Per partition: (log start, log end) and the first and last record (key, value, timestamp), as a consumer sees
    them through the broker."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 4,
                  "group.id": "kafkalog-bench-check", "enable.auto.commit": False})
    out = {}
    try:
        for p in range(2):
            out[(p, "offsets")] = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
            for off in (0, per - 1):
                c.assign([TopicPartition(TOPIC, p, off)])
                msg, deadline = None, time.monotonic() + 30
                while msg is None and time.monotonic() < deadline:
                    msg = c.poll(1.0)
                    if msg is not None and msg.error():
                        raise RuntimeError(f"{bootstrap} {TOPIC}-{p}@{off}: {msg.error()}")
                ts_type, ts = msg.timestamp() if msg is not None else (None, None)
                out[(p, off)] = None if msg is None else (
                    msg.offset(), f"key {int.from_bytes(msg.key() or b'', 'big')}",
                    f"value {len(msg.value() or b'')} B crc32 {zlib.crc32(msg.value() or b''):08x}",
                    f"ts {ts}" if ts_type == TIMESTAMP_CREATE_TIME else f"ts {ts} (type {ts_type})")
    finally:
        c.close()
    return out


def loud(msg: str) -> None:
    line = "!" * 100
    text = f"{line}\n!!! FAILED RUN: {msg}\n{line}"
    print(text, flush=True)
    try:
        same = os.path.samestat(os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno()))
    except (OSError, ValueError):
        same = False
    if not same:  # stdout goes to a file: say it on the terminal too
        print(text, file=sys.stderr, flush=True)


def interleave(sources: dict, repeat: int, spark_pid: int) -> dict:
    """Run each source's ``fn(run)`` once as a warm-up (run 0, discarded) and then ``repeat`` times, interleaved.
    ``sources``: name -> (fn, broker pid or None, expected rows of run i). fn returns {"s": seconds, "rows": n, ...}.
    A run that raises or returns the wrong number of rows is a failed run: printed loudly, its source dropped."""
    res = {name: {"s": [], "busy": [], "broker_cpu": [], "spark_cpu": [], "error": None} for name in sources}
    for i in range(repeat + 1):
        for name, (fn, pid, expect) in sources.items():
            r = res[name]
            if r["error"]:
                continue
            b0, s0 = proc_cpu(pid) if pid else 0.0, tree_cpu(spark_pid)
            try:
                out = fn(i)
            except Exception as e:  # a failed query: the row says FAILED, the other sources go on
                r["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"
                loud(f"{name} (run {i}): {r['error']}")
                continue
            b1, s1 = proc_cpu(pid) if pid else 0.0, tree_cpu(spark_pid)
            if out["rows"] != expect(i):
                r["error"] = f"counted {out['rows']:,} records, expected {expect(i):,}"
                loud(f"{name} (run {i}): {r['error']}")
                continue
            if i == 0:
                continue
            r["s"].append(out["s"])
            r["busy"].append(out.get("busy"))
            r["broker_cpu"].append(b1 - b0 if pid else None)
            r["spark_cpu"].append(tree_cpu_delta(s0, s1))
    return res


def await_stream(writer, ckpt: Path) -> dict:
    """Start an availableNow query into ``writer``; wall seconds from start() to termination, rows, micro-batches,
    seconds inside the micro-batches (triggerExecution)."""
    start = time.perf_counter()
    q = writer.option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    try:
        q.awaitTermination(1800)
    finally:
        if q.isActive:
            q.stop()
    elapsed = time.perf_counter() - start
    if q.exception() is not None:
        raise RuntimeError(f"streaming query failed: {q.exception()}")
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    shutil.rmtree(ckpt, ignore_errors=True)
    return {"s": elapsed, "rows": sum(p["numInputRows"] for p in progress), "batches": len(progress),
            "busy": sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000}


def kafka_source_section(spark, scratch: Path, data: Path, n: int, repeat: int, args, kl_frame,
                         jars_error: str | None) -> int:
    """Spark's Kafka source through kafkalog serve and through Apache Kafka beside format("kafkalog"); prints its
    tables, returns the number of failed runs. Every broker it starts is stopped before it returns."""
    import pyspark

    per = n // 2
    print()
    print(f"Spark's Kafka source (spark-sql-kafka-0-10_2.13 {pyspark.__version__}), {n:,} records in topic "
          f"{TOPIC!r}:")
    if jars_error:
        print(f"  n/a: Spark's Kafka connector is not available: {jars_error}")
        return 0
    try:
        lab = compat_lab()
    except Unavailable as e:
        print(f"  n/a: {e}")
        return 0
    spark_pid = spark_jvm_pid(spark)
    brokers = {}
    failures = 0
    try:
        kls = brokers["kafkalog"] = lab.KafkalogServer()
        try:
            kls.start(scratch)  # serves scratch/data: the data dir write_data() made (its LogStore is closed)
        except lab.LabError as e:
            print(f"  FAILED: kafkalog serve did not start: {e}")
            return 1
        assert kls.log_dir.resolve() == data.resolve(), (kls.log_dir, data)
        print(f"  kafkalog serve: pid {kls.pid} on {kls.bootstrap}, ready {kls.startup_s:.1f} s after spawn, serving "
              f"the engine's data dir")
        kafka_note = "left out (--no-apache-kafka)" if args.no_apache_kafka else None
        if not args.no_apache_kafka:
            try:
                lab.kafka_libs()
                kb = brokers["kafka"] = lab.KafkaBroker(heap=[f"-Xmx{args.kafka_heap}", f"-Xms{args.kafka_heap}"])
                kb.start(scratch / "kafka")
                print(f"  Apache Kafka {lab.KAFKA_VERSION}: pid {kb.pid} on {kb.bootstrap} (-Xmx{args.kafka_heap}), "
                      f"storage format {kb.format_s:.1f} s, start {kb.startup_s:.1f} s")
                loaded = load_kafka(kb.bootstrap, n)
                print(f"  loaded into Kafka by confluent-kafka in {loaded:.1f} s ({fmt_rate(n, loaded)}; linger.ms 50, "
                      f"batch.size 1,000,000, batch.num.messages {BATCH_RECORDS}, acks=1, no compression)")
            except lab.LabError as e:
                kafka_note = f"n/a: {' '.join(str(e).split())[:600]}"
                if "kafka" in brokers:
                    brokers.pop("kafka").stop()

        views = {name: broker_view(b.bootstrap, per) for name, b in brokers.items()}
        for name, view in views.items():
            print(f"  {name}: log start/end offsets " + ", ".join(
                f"{TOPIC}-{p} {view[(p, 'offsets')][0]}/{view[(p, 'offsets')][1]:,}" for p in range(2)))
        want = {(p, "offsets"): (0, per) for p in range(2)}
        for name, view in views.items():
            bad = {k: v for k, v in want.items() if view[k] != v}
            if bad:
                loud(f"{name} reports log start/end offsets {bad}, expected {(0, per)} per partition")
                return 1
        if "kafka" in views and views["kafka"] != views["kafkalog"]:
            diff = {k: (views["kafkalog"][k], views["kafka"][k]) for k in views["kafka"]
                    if views["kafka"][k] != views["kafkalog"][k]}
            loud(f"the brokers' first/last records differ (kafkalog, kafka): {diff}")
            return 1
        if "kafka" in views:
            print("  both brokers: the same offsets and the same first and last record (key, value, timestamp) of "
                  "each partition")

        def kafka_reader(b, stream=False, starting=None):
            r = (spark.readStream if stream else spark.read).format("kafka") \
                .option("kafka.bootstrap.servers", b.bootstrap).option("subscribe", TOPIC)
            return r.option("startingOffsets", starting or "earliest")

        labels = {"by-path": 'format("kafkalog") by path', "kafkalog": 'format("kafka") via kafkalog serve',
                  "kafka": f'format("kafka") via Apache Kafka {lab.KAFKA_VERSION}'}

        # count(): the DataFrames are built once; each count() plans afresh (the Kafka source asks the broker for
        # the offsets each time)
        def counter(df):
            def run(i):
                t0 = time.perf_counter()
                rows = df.count()
                return {"s": time.perf_counter() - t0, "rows": rows}
            return run

        sources = {"by-path": (counter(kl_frame), None, lambda i: n)}
        for name, b in brokers.items():
            sources[name] = (counter(kafka_reader(b).load()), b.pid, lambda i: n)
        batch = interleave(sources, repeat, spark_pid)

        # availableNow streams into noop; the warm-up (run 0) reads the last 2,000 records of each partition
        warm = json.dumps({TOPIC: {str(p): per - 2000 for p in range(2)}}) if per > 2000 else "earliest"
        warm_rows = 4000 if per > 2000 else n
        ck = scratch / "ck-kafka-source"

        def streamer(name, b):
            def run(i):
                starting = warm if i == 0 else "earliest"
                if b is None:
                    df = spark.readStream.format("kafkalog").option("subscribe", TOPIC) \
                        .option("startingOffsets", starting).load(str(data))
                else:
                    df = kafka_reader(b, stream=True, starting=starting).load()
                return await_stream(df.writeStream.format("noop"), ck / f"{name}-{i}")
            return run

        sources = {"by-path": (streamer("by-path", None), None, lambda i: warm_rows if i == 0 else n)}
        for name, b in brokers.items():
            sources[name] = (streamer(name, b), b.pid, lambda i: warm_rows if i == 0 else n)
        stream = interleave(sources, repeat, spark_pid)
        for res in (batch, stream):
            failures += sum(1 for r in res.values() if r["error"])

        def fmt_cpu(xs):
            xs = [x for x in xs if x is not None]
            return f"{statistics.mean(xs):.2f} s" if xs else "-"

        print()
        print(f"  {'source':<44}{'best / median s':>18}{'best rec/s':>15}{'broker CPU':>12}{'Spark CPU':>11}"
              f"{'in batches':>22}")
        for title, res in ((f"count() of {n:,}, best of {repeat} after a warm-up, interleaved", batch),
                           (f"readStream availableNow -> noop, {n:,} records, one micro-batch, wall from start() to "
                            f"termination, best of {repeat}", stream)):
            print(f"  {title}:")
            for name in ("by-path", "kafkalog", "kafka"):
                if name not in res:
                    if name == "kafka":
                        print(f"    {labels[name]:<42}  {kafka_note}")
                    continue
                r = res[name]
                if r["error"]:
                    print(f"    {labels[name]:<42}  FAILED: {r['error'][:300]}")
                    continue
                busy = [x for x in r["busy"] if x is not None]
                busy_s = f"{min(busy):6.2f} s = {fmt_rate(n, min(busy))}" if busy else ""
                print(f"    {labels[name]:<42}{min(r['s']):8.3f} /{statistics.median(r['s']):7.3f} s"
                      f"{fmt_rate(n, min(r['s'])):>15}{fmt_cpu(r['broker_cpu']):>12}{fmt_cpu(r['spark_cpu']):>11}"
                      f"{busy_s:>22}".rstrip())
        print("  (CPU = user + system seconds per run, mean over the timed runs: broker = the process the row reads "
              "through; Spark = its JVM + Python workers; 2 cores = at most 2 CPU s per wall second)")

        print()
        print(f"  {'goal':<38}{'ours best/median':>20}{'baseline best/median':>24}{'ratio':>9}{'target':>9}  result")
        for qname, res in (("count", batch), ("stream", stream)):
            for goal, ours, base, target in ((f"spark.kafka_source.{qname}.vs_kafka", "kafkalog", "kafka", 1.0),
                                             (f"spark.by_path.{qname}.vs_kafka_source", "by-path", "kafkalog", None)):
                a, b = res.get(ours), res.get(base)
                if a is None or b is None or a["error"] or b["error"]:
                    why = "FAILED run" if (a and a["error"]) or (b and b["error"]) else (kafka_note or "n/a")
                    print(f"  {goal:<38}{'':>20}{'':>24}{'n/a':>9}{(f'>={target}x' if target else '-'):>9}  "
                          f"{why if not target else 'n/a (' + why + ')'}")
                    continue
                ratio = min(b["s"]) / min(a["s"])  # records/s ratio: their time / our time
                verdict = ("PASS" if ratio >= target else "MISS") if target else "info"
                print(f"  {goal:<38}{min(a['s']):9.3f} /{statistics.median(a['s']):7.3f} s"
                      f"{min(b['s']):12.3f} /{statistics.median(b['s']):7.3f} s{ratio:>8.2f}x"
                      f"{(f'>={target}x' if target else '-'):>9}  {verdict}")
        print("  (vs_kafka: via kafkalog serve / via Apache Kafka, records/s; vs_kafka_source: format(\"kafkalog\") "
              "by path / format(\"kafka\") via kafkalog serve)")
        for name, b in brokers.items():  # nothing aged out or went missing while the runs read it
            after = broker_view(b.bootstrap, per)
            if after != views[name]:
                failures += 1
                loud(f"{name}: the topic changed during the runs: before {views[name]}, after {after}")
        for name, b in brokers.items():
            rss = b.rss() / 1e6
            print(f"  {name} broker after the runs: RSS {rss:.0f} MB, CPU {proc_cpu(b.pid):.1f} s since start")
    finally:
        for b in brokers.values():
            b.stop()
    return failures


def fmt_rate(n, seconds):
    return f"{n / seconds / 1e6:.2f} M rec/s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="500,000 records, 3 runs")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a fresh temp dir)")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--no-kafka", action="store_true",
                      help="leave out Spark's Kafka source section (kafkalog serve and Apache Kafka)")
    only.add_argument("--kafka", action="store_true", help="run only Spark's Kafka source section")
    ap.add_argument("--no-apache-kafka", action="store_true",
                    help="in the Kafka source section, only format(\"kafka\") via kafkalog serve (no Apache Kafka)")
    ap.add_argument("--kafka-heap", default="512m", help="Apache Kafka's -Xmx and -Xms (default 512m)")
    args = ap.parse_args(argv)
    n, repeat = (500_000, 3) if args.quick else (args.records, args.repeat)
    n -= n % 2
    # SIGTERM unwinds like Ctrl-C does: the finally blocks stop the brokers and Spark and remove the scratch dir
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scratch = Path(tempfile.mkdtemp(prefix="kafkalog-spark-bench-", dir=args.dir))
    try:
        return _run(scratch, n, repeat, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(scratch: Path, n: int, repeat: int, args) -> int:
    import pyarrow
    import pyspark

    data = scratch / "data"
    load0 = os.getloadavg()
    wall0 = time.perf_counter()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, local[2]")
    jars, jars_error = [], None
    if not args.no_kafka:
        try:
            jars = spark_kafka_jars(pyspark.__version__)
        except Unavailable as e:
            jars_error = str(e)
    wrote = write_data(data, n)
    size = sum(f.stat().st_size for f in data.rglob("*.log"))
    print(f"data: {n:,} records ({KEY_BYTES} B key + {VALUE_BYTES} B value), 2 partitions, "
          f"{size / 1e6:.0f} MB of segments, written by the engine in {wrote:.1f} s")
    failures = 0
    spark = session(scratch, jars)
    try:
        by_name = frames(spark, data, n)
        if not args.kafka:
            by_path_section(spark, data, n, repeat, by_name)
        if not args.no_kafka:
            failures += kafka_source_section(spark, scratch, data, n, repeat, args, by_name["kafkalog"], jars_error)
        if not args.kafka:
            streaming_section(spark, scratch, data, n)
    finally:
        spark.stop()
    load1 = os.getloadavg()
    print(f"\nload average: start {load0[0]:.2f}, end {load1[0]:.2f} (other work on the machine skews every row); "
          f"wall {time.perf_counter() - wall0:.0f} s")
    if failures:
        print(f"{failures} source(s) had a FAILED run (an error or a wrong count): see the !!! lines above")
        return 1
    return 0


def by_path_section(spark, data: Path, n: int, repeat: int, by_name: dict) -> None:
    results = {}
    for qname, query in (("count", q_count), ("groupby", q_groupby)):
        results[qname] = measure(by_name, query, repeat)
        got = results[qname]["answers"]
        assert got["kafkalog"] == n if qname == "count" else len(got["kafkalog"]) == 2, got
        if qname == "groupby":
            assert [r[1] for r in got["kafkalog"]] == [n // 2, n // 2], got
            assert [r[2] for r in got["kafkalog"]] == [n // 2 * VALUE_BYTES] * 2, got

    print()
    print(f"{'goal':<28}{'kafkalog best/median':>24}{'baseline best/median':>34}{'ratio':>9}"
          f"{'target':>9}  result")
    for qname in ("count", "groupby"):
        t = results[qname]["times"]
        ours = min(t["kafkalog"])
        for base, target in (("arrow-memory", 0.7), ("spark.range", None)):
            ratio = min(t[base]) / ours  # records/s ratio: theirs time / our time
            verdict = ("PASS" if ratio >= target else "MISS") if target else "info"
            name = f"spark.{qname}.vs_{base.replace('.', '_').replace('-', '_')}"
            print(f"{name:<28}{min(t['kafkalog']):>10.3f} /{statistics.median(t['kafkalog']):6.3f} s"
                  f"{base:>16} {min(t[base]):6.3f} /{statistics.median(t[base]):6.3f} s"
                  f"{ratio:>8.2f}x{(f'>={target}x' if target else '-'):>9}  {verdict}")
    print()
    print("absolute (best of R):")
    for qname in ("count", "groupby"):
        t = results[qname]["times"]
        print("  " + qname + ": " + ", ".join(f"{k} {fmt_rate(n, min(v))}" for k, v in t.items()))


def streaming_section(spark, scratch: Path, data: Path, n: int) -> None:
    print()
    print("streaming (availableNow; wall = start() to termination, including the query's start and stop; "
          "in batches = the micro-batches' triggerExecution):")
    with kafkalog.LogStore(data, maintenance=False) as store:  # warm-up query on a small topic, discarded
        store.create_topic("warm", partitions=2)
        for p in range(2):
            store.log("warm", p).append_batch([b"x" * VALUE_BYTES] * 1000)
    stream_run(spark, data, scratch / "ck-warm", "noop", topic="warm")
    for label, ckpt, sink, limit in (("kafkalog -> noop, maxOffsetsPerTrigger unset", "ck-noop", "noop", None),
                                     (f"kafkalog -> noop, maxOffsetsPerTrigger={max(n // 10, 1)}",
                                      "ck-limited", "noop", max(n // 10, 1)),
                                     ("kafkalog -> kafkalog sink (exactly-once), maxOffsetsPerTrigger unset",
                                      "ck-copy", "kafkalog", None)):
        secs, got, batches, busy = stream_run(spark, data, scratch / ckpt, sink, limit)
        print(f"  {label}: {got:,} records, {batches} micro-batch(es): wall {secs:.2f} s = {fmt_rate(got, secs)}"
              f"; in batches {busy:.2f} s = {fmt_rate(got, busy)}")
    with kafkalog.LogStore(data, read_only=True) as store:
        copied = sum(store.log("copy", p).log_end_offset for p in range(store.partitions_for("copy")))
    assert copied == n, (copied, n)
    print(f"  (the sink's copy read back through the engine: {copied:,} records)")


if __name__ == "__main__":
    sys.exit(main())
