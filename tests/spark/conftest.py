"""One local Spark session (local[2]) for every Spark test of the run, and helpers to build and read data dirs.

Spark's Python workers import the data source by reference, so they must find this kafkalog: the directory that
holds the imported ``kafkalog`` package (the working tree here, site-packages in CI) goes on PYTHONPATH before the
JVM starts; the JVM's environment is frozen then, so the test process's own environment is restored right after.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

import kafkalog
import kafkalog.spark

PKG_ROOT = Path(kafkalog.__file__).resolve().parents[1]
T0 = 1_700_000_000_000

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""

AUTO_REGISTRATION: dict = {}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    pytest.importorskip("pyarrow", reason="the spark extra is not installed")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Spark needs Java 17+)")
    from pyspark.sql import SparkSession

    base = tmp_path_factory.mktemp("spark-session")
    (base / "log4j2.properties").write_text(_LOG4J)
    env = {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": str(PKG_ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
        "PYTHONSAFEPATH": "1",  # workers never import a source tree from their cwd (it has no compiled engine in CI)
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "localhost",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        session = (SparkSession.builder.master("local[2]").appName("kafkalog-tests")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.sql.shuffle.partitions", "2")
                   .config("spark.default.parallelism", "2")
                   .config("spark.sql.session.timeZone", "UTC")
                   .config("spark.sql.streaming.stopTimeout", "30s")
                   # tiny jobs: the C1 compiler alone and the serial GC leave more of 2 cores to the work
                   .config("spark.driver.extraJavaOptions",
                           f"-Dlog4j.configurationFile=file:{base / 'log4j2.properties'} "
                           "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
                   .getOrCreate())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    session.sparkContext.setLogLevel("ERROR")
    # Before any explicit registration: Spark finds pyspark_kafkalog by itself (its lookup runs once per JVM, the
    # first time a format name is unknown, and an explicit registration would override what it finds).
    probe = base / "probe"
    with kafkalog.LogStore(probe, maintenance=False) as store:
        store.create_topic("probe", partitions=1)
        store.log("probe", 0).append_batch([b"found"], timestamps=[T0])
    try:
        AUTO_REGISTRATION["rows"] = session.read.format("kafkalog").option("subscribe", "probe").load(
            str(probe)).select("value").collect()
    except Exception as e:  # noqa: BLE001  (test_packaging reports it)
        AUTO_REGISTRATION["error"] = e
    kafkalog.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def auto_registration(spark):
    """What ``format("kafkalog")`` gave before any explicit registration: {"rows": [...]} or {"error": exc}."""
    return AUTO_REGISTRATION


def write_records(path, topic, partitions, per_partition, *, batch=5, config=None, compression=None, t0=T0):
    """Create ``topic`` and append ``per_partition`` records to each partition through the engine: value
    b"<p>:<i>", key b"k<i>" (None every 5th), timestamp t0 + i*1000, headers on every 3rd record. Returns the
    expected rows as (key, value, topic, partition, offset, timestamp ms, timestampType, headers)."""
    rows = []
    with kafkalog.LogStore(path, maintenance=False) as store:
        if topic not in store.topics():
            store.create_topic(topic, partitions=partitions, config=config)
        for p in range(partitions):
            log = store.log(topic, p)
            base = log.log_end_offset
            for lo in range(0, per_partition, batch):
                idx = range(lo, min(lo + batch, per_partition))
                values = [f"{p}:{base + i}".encode() for i in idx]
                keys = [None if (base + i) % 5 == 0 else f"k{base + i}".encode() for i in idx]
                stamps = [t0 + (base + i) * 1000 for i in idx]
                headers = [[("h", str(base + i).encode()), ("n", None)] if (base + i) % 3 == 0 else None for i in idx]
                first = log.append_batch(values, keys, stamps, headers, compression=compression)
                for j in range(len(idx)):
                    rows.append((keys[j], values[j], topic, p, first + j, stamps[j], 0, headers[j]))
    return rows


def spark_rows(df, headers=False):
    """Collect a kafkalog DataFrame as comparable tuples (timestamps as epoch ms, headers as (key, value) lists)."""
    cols = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) as ts", "timestampType"]
    if headers:
        cols.append("headers")
    out = []
    for r in df.selectExpr(*cols).collect():
        t = (None if r[0] is None else bytes(r[0]), bytes(r[1]), r[2], r[3], r[4], r[5], r[6])
        if headers:
            t += (None if r[7] is None else [(h["key"], None if h["value"] is None else bytes(h["value"]))
                                             for h in r[7]],)
        out.append(t)
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


def engine_rows(path, topic):
    """Every record of ``topic`` through the engine: (partition, offset, key, value, headers)."""
    out = []
    with kafkalog.LogStore(path, read_only=True) as store:
        for p in range(store.partitions_for(topic)):
            for r in store.log(topic, p).records():
                out.append((p, r.offset, r.key, r.value, [tuple(h) for h in r.headers]))
    return out


def run_available_now(writer, timeout=180):
    """Start an availableNow query, wait for it (bounded) and return it; raises the query's exception."""
    q = writer.trigger(availableNow=True).start()
    try:
        finished = q.awaitTermination(timeout)
    finally:
        if q.isActive:
            q.stop()
    assert finished, f"query did not finish within {timeout} s"
    return q
