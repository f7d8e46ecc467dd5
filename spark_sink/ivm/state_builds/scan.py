"""An index state table built on Spark (``index``, ``ops.scan.index_table``: the layout): every
row of the source with a non-NULL value in the indexed column, as (k, p_<key>...)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kvstore.table_info import TableInfo
from spark_sink.ivm.ops.state_table import StateTable
from spark_sink.ivm.state_builds import BuildContext, builds


@builds("index")
def index_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """The index of ``st.source`` by ``st.column`` (the source registered for the build)."""
    src = ctx.session.table(st.source)
    src_info = ctx.client.describe_table(st.source)
    return src.where(F.col(st.column).isNotNull()).select(
        F.col(st.column).alias("k"),
        *(F.col(p).alias(f"p_{p}") for p in src_info.primary_key),
    )
