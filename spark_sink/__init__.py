"""spark_sink: exactly-once writes into snapview from Spark.

from spark_sink import EpochWriter
q = df.writeStream.foreachBatch(EpochWriter(addr, table="events", mode="append")).start()

spark_sink.register(spark)   # format("snapview") with writers, for writeStream
"""

from pyspark.sql import SparkSession

import spark_source
from spark_sink.datasource import SnapviewSinkDataSource
from spark_sink.epoch_writer import EpochWriter


def register(spark: SparkSession) -> None:
    """Make ``format("snapview")`` available for reads and writes in ``spark``."""
    spark_source.register(spark)
    spark.dataSource.register(SnapviewSinkDataSource)


__all__ = ["EpochWriter", "SnapviewSinkDataSource", "register"]
