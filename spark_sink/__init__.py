"""spark_sink: exactly-once writes into snapview from Spark.

from spark_sink import EpochWriter
q = df.writeStream.foreachBatch(EpochWriter(addr, table="events", mode="append")).start()
EpochWriter(addr, table="events", mode="append").load(df)   # a one-off load: its own epoch

spark_sink.register(spark)   # format("snapview") with writers, for write and writeStream

from spark_sink import MaterializedView   # a SQL query kept as a consistent view
job = (MaterializedView.builder(spark).coordinator(addr).query(sql).target("v")
       .build().start())

The public names are imported when first used (PEP 562), not with the package: Spark's Python
workers import ``spark_sink.<module>`` for every task that runs our code (a data source's reader,
a ``mapInArrow`` function), and each new worker process would otherwise also import the view
planner, the delta rules and pandas, about a second of CPU per worker on 2 cores, which every
view's first build and every source scan waited for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_sink.datasource import SnapviewSinkDataSource
    from spark_sink.epoch_writer import EpochWrite, EpochWriter
    from spark_sink.materialized_view import MaterializedView, MaterializedViewBuilder, ViewJob
    from spark_sink.view_progress import ViewProgress
    from spark_source import RegisteredTables, register_tables

# public name -> the module that defines it
_LAZY = {
    "EpochWrite": "spark_sink.epoch_writer",
    "EpochWriter": "spark_sink.epoch_writer",
    "MaterializedView": "spark_sink.materialized_view",
    "MaterializedViewBuilder": "spark_sink.materialized_view",
    "RegisteredTables": "spark_source",
    "SnapviewSinkDataSource": "spark_sink.datasource",
    "ViewJob": "spark_sink.materialized_view",
    "ViewProgress": "spark_sink.view_progress",
    "register_tables": "spark_source",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_sink' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def register(spark: SparkSession) -> None:
    """Make ``format("snapview")`` available for reads and writes in ``spark``."""
    import spark_source
    from spark_sink.datasource import SnapviewSinkDataSource

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
