"""spark_source: the ``snapview`` PySpark data source (snapshot reads, change reads, streams).

    import spark_source
    spark_source.register(spark)
    spark.read.format("snapview").option("coordinator", addr).option("table", "t").load()
    spark_source.register_tables(spark, addr, consistent=True)  # every table by name in SQL

For writes (``writeStream.format("snapview")``) register ``spark_sink.register(spark)`` instead,
which registers the same name with writers added.
"""

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

from spark_source.barrier_source import BarrierDataSource
from spark_source.datasource import SnapviewDataSource
from spark_source.options import CHANGE_TYPE, COMMIT_TS, SourceOptions
from spark_source.tables import RegisteredTables, register_tables
from spark_source.worker_python import ensure_worker_python


def register(spark: SparkSession, snapview: type[DataSource] = SnapviewDataSource) -> None:
    """Make ``format("snapview")`` available in ``spark`` (read side).

    Leaves the session's Python data source filter pushdown setting alone: the source takes no
    filters (see readers.SnapshotReader), so with pushdown off (Spark 4.3's default) Spark plans
    each loaded DataFrame's read once and every query of it reads one snapshot.

    First makes sure Spark's Python workers can import snapview (spark_source.worker_python):
    with PYSPARK_PYTHON unset they run this interpreter; a PYSPARK_PYTHON that cannot import
    snapview raises InvalidArgument at once, before anything is registered."""
    ensure_worker_python(spark)
    register_source(spark, snapview)  # spark_sink passes its subclass, with writers
    register_source(spark, BarrierDataSource)


_REGISTERED: dict[tuple[str, str], type[DataSource]] = {}  # (session id, name) -> class


def register_source(spark: SparkSession, source: type[DataSource]) -> None:
    """Register ``source`` in ``spark``, once: registering the same class (or a superclass of
    the one registered, as the read-only source under the sink) again under the same name in the
    same session does nothing (Spark would log "replaced a previously registered data
    source" each time); a session that already has that name from ``newSession`` keeps the one it
    has (Spark refuses to replace a data source in a cloned session)."""
    from pyspark.errors import AnalysisException

    key = (str(spark._jsparkSession.sessionUUID()), source.name())
    have = _REGISTERED.get(key)
    if have is not None and issubclass(have, source):  # the same, or the sink's subclass
        return
    try:
        spark.dataSource.register(source)
    except AnalysisException as e:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise
    _REGISTERED[key] = source


__all__ = [
    "CHANGE_TYPE",
    "COMMIT_TS",
    "BarrierDataSource",
    "RegisteredTables",
    "SnapviewDataSource",
    "SourceOptions",
    "register",
    "register_tables",
]
