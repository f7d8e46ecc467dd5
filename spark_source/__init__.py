"""spark_source: the ``snapview`` PySpark data source (snapshot reads, change reads, streams).

    import spark_source
    spark_source.register(spark)
    spark.read.format("snapview").option("coordinator", addr).option("table", "t").load()

For writes (``writeStream.format("snapview")``) register ``spark_sink.register(spark)`` instead,
which registers the same name with writers added.
"""

from pyspark.sql import SparkSession

from spark_source.datasource import SnapviewDataSource
from spark_source.options import CHANGE_TYPE, COMMIT_TS, SourceOptions

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Make ``format("snapview")`` available in ``spark`` (read side).

    Also turns on Python data source filter pushdown for the session (off by default in Spark
    4.3, where a reader that accepts filters is refused without it), so primary-key filters
    narrow the key ranges read."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(SnapviewDataSource)


__all__ = ["CHANGE_TYPE", "COMMIT_TS", "SnapviewDataSource", "SourceOptions", "register"]
