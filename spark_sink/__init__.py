"""spark_sink: exactly-once writes into snapview from Spark.

from spark_sink import EpochWriter
q = df.writeStream.foreachBatch(EpochWriter(addr, table="events", mode="append")).start()
EpochWriter(addr, table="events", mode="append").load(df)   # a one-off load: its own epoch

spark_sink.register(spark)   # format("snapview") with writers, for write and writeStream

from spark_sink import MaterializedView   # a SQL query kept as a consistent view
job = (MaterializedView.builder(spark).coordinator(addr).query(sql).target("v")
       .build().start())
"""

from pyspark.sql import SparkSession

import spark_source
from spark_sink.datasource import SnapviewSinkDataSource
from spark_sink.epoch_writer import EpochWrite, EpochWriter
from spark_sink.materialized_view import MaterializedView, MaterializedViewBuilder, ViewJob
from spark_sink.view_progress import ViewProgress
from spark_source import RegisteredTables, register_tables


def register(spark: SparkSession) -> None:
    """Make ``format("snapview")`` available for reads and writes in ``spark``."""
    spark_source.register(spark, SnapviewSinkDataSource)


__all__ = [
    "EpochWrite",
    "EpochWriter",
    "MaterializedView",
    "MaterializedViewBuilder",
    "RegisteredTables",
    "SnapviewSinkDataSource",
    "ViewJob",
    "ViewProgress",
    "register",
    "register_tables",
]
