"""Found by Spark itself: pyspark 4.x imports every top-level module named ``pyspark_*`` and registers its
``DefaultSource`` under ``DefaultSource.name()`` ("kafkalog"), so ``spark.read.format("kafkalog")`` works with no
registration call once kafkalog is installed with the ``spark`` extra."""

from kafkalog.spark import KafkaLogDataSource as DefaultSource

__all__ = ["DefaultSource"]
