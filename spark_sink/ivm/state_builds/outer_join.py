"""The match counts of an outer join's outer side built on Spark (``matches``,
``ops.outer_join.matches_table``: the layout), from the other input of the query's own join."""

from __future__ import annotations

import functools

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kvstore.table_info import TableInfo
from spark_sink.ivm.catalyst import catalyst_joins
from spark_sink.ivm.ops.state_table import StateTable
from spark_sink.ivm.plan import joins, output
from spark_sink.ivm.state_builds import BuildContext, builds


@builds("matches")
def matches_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """The match counts of one outer side (spark_sink.ivm.outer): the other input of the
    plan's ``st.index``-th join, as Spark computes it, counted per non-NULL join key."""
    join = joins(ctx.plan.root)[st.index]
    cjoin = catalyst_joins(ctx.df._jdf.queryExecution().optimizedPlan())[st.index]
    other, keys = (
        (cjoin.right(), join.right_keys) if st.column == "left" else (cjoin.left(), join.left_keys)
    )
    other_df = ctx.df_of(other)
    ids = [a.id for a in output(join.right if st.column == "left" else join.left)]
    other_df = other_df.toDF(*[f"c{i}" for i in range(len(ids))])  # names may repeat
    key_cols = [F.col(f"c{ids.index(k)}").alias(f"k{i}") for i, k in enumerate(keys)]
    ok = functools.reduce(lambda a, b: a & b, [c.isNotNull() for c in key_cols])
    return (
        other_df.select(*key_cols)
        .where(ok)
        .groupBy(*[f"k{i}" for i in range(len(keys))])
        .agg(F.count(F.lit(1)).cast("bigint").alias("n"))
    )
