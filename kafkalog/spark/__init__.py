"""kafkalog as a Spark data source: ``spark.read.format("kafkalog")``, ``readStream``, ``write``, ``writeStream``
with Spark's Kafka options and schema (see source.py and sink.py).

This package imports without pyspark; the data source classes load pyspark (and pyarrow) when first used, and
fail with an ImportError naming the ``kafkalog[spark]`` extra when it is missing. Installed, the top-level module
``pyspark_kafkalog`` lets Spark find the source by itself; ``register(spark)`` registers it explicitly.
"""

from __future__ import annotations

__all__ = ["KafkaLogDataSource", "register"]

_EXTRA = "kafkalog.spark needs pyspark>=4.2 and pyarrow: pip install 'kafkalog[spark]'"


def _load():
    try:
        from . import source
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        if missing.split(".")[0] in ("pyspark", "pyarrow", "py4j") or "pyspark" in str(e):
            raise ImportError(f"{_EXTRA} ({e})", name=missing or None) from e
        raise
    return source


def __getattr__(name: str):
    if name == "KafkaLogDataSource":
        return _load().KafkaLogDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark) -> None:
    """Register ``format("kafkalog")`` with a SparkSession (an installed kafkalog is also found by Spark itself,
    through the top-level module ``pyspark_kafkalog``)."""
    source = _load().KafkaLogDataSource  # first: without pyspark, say which extra is missing
    spark.dataSource.register(source)
