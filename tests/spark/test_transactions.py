"""kafka.isolation.level through a real Spark session: a batch read and an availableNow stream of read_committed
end at the last stable offset and drop aborted transactions' records; read_uncommitted (the default) reads all."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import kafkalog  # noqa: E402
from kafkalog.errors import InvalidConfigError  # noqa: E402
from kafkalog.spark.options import parse_read_options  # noqa: E402

from .conftest import run_available_now, spark_rows  # noqa: E402


@pytest.fixture(scope="module")
def txn_data(tmp_path_factory):
    """Topic ``tx`` (1 partition): c0 c1 COMMIT a0 ABORT open... (the last transaction left open: LSO 5)."""
    path = tmp_path_factory.mktemp("txn") / "data"
    store = kafkalog.LogStore(path, maintenance=False)
    store.create_topic("tx", 1)
    p = kafkalog.KafkaProducer(store, transactional_id="spark-tx")
    p.init_transactions()
    p.begin_transaction()
    p.send("tx", b"c0")
    p.send("tx", b"c1")
    p.commit_transaction()
    p.begin_transaction()
    p.send("tx", b"a0")
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    p.send("tx", b"open")
    p.flush()
    assert (store.log("tx", 0).last_stable_offset, store.log("tx", 0).high_watermark) == (5, 6)
    yield path
    p.close()
    store.close()


def _read(spark, path, **options):
    reader = spark.read.format("kafkalog").option("subscribe", "tx")
    for k, v in options.items():
        reader = reader.option(k, v)
    return [(r[1], r[4]) for r in spark_rows(reader.load(str(path)))]


def test_batch_read_isolation_level(spark, txn_data):
    assert _read(spark, txn_data, **{"kafka.isolation.level": "read_committed"}) == [(b"c0", 0), (b"c1", 1)]
    assert _read(spark, txn_data) == [(b"c0", 0), (b"c1", 1), (b"a0", 3), (b"open", 5)]
    assert _read(spark, txn_data, **{"kafka.isolation.level": "read_uncommitted"}) == _read(spark, txn_data)
    # an explicit end past the LSO is cut to it
    assert _read(spark, txn_data, endingOffsets='{"tx":{"0":6}}',
                 **{"kafka.isolation.level": "read_committed"}) == [(b"c0", 0), (b"c1", 1)]


def test_stream_read_committed_ends_at_the_last_stable_offset(spark, txn_data, tmp_path):
    seen = []
    df = (spark.readStream.format("kafkalog").option("subscribe", "tx").option("startingOffsets", "earliest")
          .option("kafka.isolation.level", "read_committed").load(str(txn_data)))
    run_available_now(df.writeStream.foreachBatch(lambda b, i: seen.extend(spark_rows(b)))
                      .queryName("txn_stream").option("checkpointLocation", str(tmp_path / "ckpt")))
    assert [(r[1], r[4]) for r in seen] == [(b"c0", 0), (b"c1", 1)]


def test_isolation_options_are_checked():
    base = {"path": "/nowhere", "subscribe": "tx"}
    assert parse_read_options({**base, "kafka.isolation.level": "READ_COMMITTED"}).read_committed
    assert not parse_read_options(base).read_committed
    with pytest.raises(InvalidConfigError, match="read_uncommitted, read_committed"):
        parse_read_options({**base, "kafka.isolation.level": "serializable"})
    with pytest.raises(InvalidConfigError, match="kafka.isolation.level"):
        parse_read_options({**base, "isolation.level": "read_committed"})
