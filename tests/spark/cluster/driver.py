"""A Spark driver of the test cluster, in a process of its own (one SparkContext per process: the local Spark tests
hold theirs in the pytest process). It connects to the standalone master named by ``--master``, then runs jobs
read one JSON line at a time from stdin: ``{"job": NAME, "kwargs": {...}}``. Each answer is one line on stdout,
``@@job {"ok": RESULT}`` or ``@@job {"error": {"type", "message", "java_frames"}}``.

The jobs below are what a user's pipeline does with Spark's own Kafka connector (``format("kafka")``,
``spark-sql-kafka-0-10``) against kafkalog's broker, and with ``format("kafkalog")``, on executors that run on other
hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

MARK = "@@job "


def kafka_opts(bootstrap: str, security: dict | None = None) -> dict:
    opts = {"kafka.bootstrap.servers": bootstrap}
    for k, v in (security or {}).items():
        opts["kafka." + k] = v
    return opts


def _rows(df, headers=False) -> list:
    cols = ["CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition", "offset",
            "unix_millis(timestamp) AS ts", "timestampType"]
    if headers:
        cols.append("transform(headers, h -> struct(h.key AS key, CAST(h.value AS STRING) AS value)) AS headers")
    out = []
    for r in df.selectExpr(*cols).collect():
        row = [r["key"], r["value"], r["topic"], r["partition"], r["offset"], r["ts"], r["timestampType"]]
        if headers:
            row.append(None if r["headers"] is None else [[h["key"], h["value"]] for h in r["headers"]])
        out.append(row)
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


# -- jobs ---------------------------------------------------------------------------------------------------------

def kafka_read(spark, bootstrap, topic, options=None, security=None, headers=False):
    """A batch read with Spark's Kafka source: every row, sorted by (topic, partition, offset)."""
    r = spark.read.format("kafka").options(**kafka_opts(bootstrap, security)).option("subscribe", topic)
    if headers:
        r = r.option("includeHeaders", "true")
    for k, v in (options or {}).items():
        r = r.option(k, v)
    return _rows(r.load(), headers)


def kafka_count(spark, bootstrap, topic, options=None, security=None):
    r = spark.read.format("kafka").options(**kafka_opts(bootstrap, security)).option("subscribe", topic)
    for k, v in (options or {}).items():
        r = r.option(k, v)
    return r.load().count()


def kafka_stream_to_files(spark, bootstrap, topic, checkpoint, out_dir, options=None, security=None,
                          trigger="availableNow", run_seconds=None):
    """A streaming read with Spark's Kafka source into one JSON file per micro-batch (``batch-<id>.json``, written
    atomically by foreachBatch on the driver, so a replayed batch replaces its own file). Returns the number of
    batches this run completed."""
    os.makedirs(out_dir, exist_ok=True)
    r = (spark.readStream.format("kafka").options(**kafka_opts(bootstrap, security)).option("subscribe", topic)
         .option("includeHeaders", "true"))
    for k, v in (options or {}).items():
        r = r.option(k, v)

    def each(df, batch_id):
        rows = _rows(df, headers=True)
        tmp = os.path.join(out_dir, f".batch-{batch_id}.tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f)
        os.replace(tmp, os.path.join(out_dir, f"batch-{batch_id}.json"))

    w = r.load().writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
    if trigger == "availableNow":
        q = w.trigger(availableNow=True).start()
        q.awaitTermination(300)
    else:
        q = w.trigger(processingTime=trigger).start()
        q.awaitTermination(run_seconds)
    done = len(q.recentProgress)
    if q.isActive:
        q.stop()
    if q.exception() is not None:
        raise q.exception()
    return done


def kafka_write(spark, bootstrap, topic, rows, security=None):
    """A batch write with Spark's Kafka sink: rows of [key, value, partition, headers]."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType
    schema = StructType([StructField("key", StringType()), StructField("value", StringType()),
                         StructField("partition", IntegerType()),
                         StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                                      StructField("value", BinaryType())])))])
    data = [(k, v, p, None if h is None else [(hk, None if hv is None else hv.encode()) for hk, hv in h])
            for k, v, p, h in rows]
    df = spark.createDataFrame(data, schema).repartition(2)
    (df.write.format("kafka").options(**kafka_opts(bootstrap, security)).option("topic", topic).save())
    return len(rows)


def kafka_stream_copy(spark, bootstrap, src, dst, checkpoint, options=None, security=None):
    """A streaming read of ``src`` with Spark's Kafka source, written by Spark's Kafka sink to ``dst`` (upper-cased
    values), availableNow. Returns the rows written."""
    r = spark.readStream.format("kafka").options(**kafka_opts(bootstrap, security)).option("subscribe", src)
    for k, v in (options or {}).items():
        r = r.option(k, v)
    q = (r.load().selectExpr("key", "upper(CAST(value AS STRING)) AS value", "partition")
         .writeStream.format("kafka").options(**kafka_opts(bootstrap, security)).option("topic", dst)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(300)
    if q.exception() is not None:
        raise q.exception()
    return sum(p["numInputRows"] for p in q.recentProgress)


def kafkalog_read(spark, path, topic):
    """``format("kafkalog")`` by path: the executors must see the path."""
    return spark.read.format("kafkalog").option("subscribe", topic).load(path).count()


def kafkalog_write(spark, path, topic, n):
    df = spark.range(n).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value").repartition(2)
    df.write.format("kafkalog").option("topic", topic).mode("append").save(path)
    return n


def executor_hosts(spark):
    """Where the tasks run: (host address, can it see a path) per executor, from inside the tasks."""
    sc = spark.sparkContext
    return sorted(set(sc.parallelize(range(8), 8).map(
        lambda _: os.environ.get("SPARK_LOCAL_IP", "?")).collect()))


def path_visible(spark, path):
    sc = spark.sparkContext
    return sorted(set(sc.parallelize(range(8), 8).map(
        lambda _: (os.environ.get("SPARK_LOCAL_IP", "?"), os.path.exists(path))).collect()))


JOBS = {f.__name__: f for f in (kafka_read, kafka_count, kafka_stream_to_files, kafka_write, kafka_stream_copy,
                                 kafkalog_read, kafkalog_write, executor_hosts, path_visible)}


def _error(e: BaseException) -> dict:
    text = str(e)
    return {"type": type(e).__name__, "message": text, "java_frames": text.count("\tat org.apache."),
            "traceback": traceback.format_exc()[-4000:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--conf", action="append", default=[])
    args = ap.parse_args()
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(args.master).appName("kafkalog-cluster-tests")
    for kv in args.conf:
        k, v = kv.split("=", 1)
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    import kafkalog.spark
    kafkalog.spark.register(spark)
    # wait for both executors: a job before they are up would run its tasks wherever the first one is
    want = int(spark.conf.get("spark.kafkalog.test.executors", "2"))
    deadline = time.monotonic() + 120
    while (spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < want + 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    print(MARK + json.dumps({"ok": "ready"}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            result = {"ok": JOBS[req["job"]](spark, **req.get("kwargs", {}))}
        except Exception as e:  # noqa: BLE001  (every failure goes back to the test, which decides)
            result = {"error": _error(e)}
        print(MARK + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
