"""The match counts of an outer join's outer side (``matches``, ``ops.outer_join.matches_table``)
and of a semi or anti join's right side (``exists``, ``ops.semi_join.semi_table`` and, for an
inequality residual, ``pairs_table``) built on
Spark, from the other input of the query's own join, counted per non-NULL join key."""

from __future__ import annotations

import functools

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kvstore.table_info import TableInfo
from spark_sink.ivm.catalyst import catalyst_joins, catalyst_semi_joins
from spark_sink.ivm.ops.semi_join import PAIRS, inequality
from spark_sink.ivm.ops.state_table import StateTable
from spark_sink.ivm.plan import Node, joins, output, semi_joins
from spark_sink.ivm.state_builds import BuildContext, builds


@builds("matches")
def matches_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """The match counts of one outer side (spark_sink.ivm.outer): the other input of the
    plan's ``st.index``-th join, as Spark computes it, counted per non-NULL join key."""
    join = joins(ctx.plan.root)[st.index]
    cjoin = catalyst_joins(ctx.df._jdf.queryExecution().optimizedPlan())[st.index]
    if st.column == "left":
        return key_counts(ctx.df_of(cjoin.right()), join.right, join.right_keys)
    return key_counts(ctx.df_of(cjoin.left()), join.left, join.left_keys)


@builds("exists")
def exists_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """The right rows of the plan's ``st.index``-th semi or anti join, as Spark computes them,
    counted per non-NULL join key (for an ``inequality`` residual: those whose compared column is
    not NULL, or, for the ``pairs`` table, per key and value of that column)."""
    semi = semi_joins(ctx.plan.root)[st.index]
    cjoin = catalyst_semi_joins(ctx.df._jdf.queryExecution().optimizedPlan())[st.index]
    right = ctx.df_of(cjoin.right())
    ne = inequality(semi)
    if ne is None:
        return key_counts(right, semi.right, semi.right_keys)
    if st.column == PAIRS:  # per key and value of the compared column
        return key_counts(right, semi.right, (*semi.right_keys, ne[0]))
    return key_counts(right, semi.right, semi.right_keys, not_null=(ne[0],))


def key_counts(
    df: DataFrame, node: Node, keys: tuple[int, ...], not_null: tuple[int, ...] = ()
) -> DataFrame:
    """``df`` (the rows of ``node``) counted per non-NULL value of its columns ``keys``, over
    its rows whose columns ``not_null`` are not NULL either: columns k0, ... and n (BIGINT)."""
    ids = [a.id for a in output(node)]
    df = df.toDF(*[f"c{i}" for i in range(len(ids))])  # names may repeat
    key_cols = [F.col(f"c{ids.index(k)}").alias(f"k{i}") for i, k in enumerate(keys)]
    checks = key_cols + [F.col(f"c{ids.index(c)}") for c in not_null]
    ok = functools.reduce(lambda a, b: a & b, [c.isNotNull() for c in checks])
    return (
        df.where(ok)
        .select(*key_cols)
        .groupBy(*[f"k{i}" for i in range(len(keys))])
        .agg(F.count(F.lit(1)).cast("bigint").alias("n"))
    )
