"""The state of an aggregate built on Spark: its group states (``groups``) and the value
multisets of its MIN/MAX and DISTINCT functions (``values``), from the input of the query's own
Aggregate (``ops.aggregate.groups_table``, ``values_tables``: the layouts)."""

from __future__ import annotations

import functools

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from kvstore.table_info import TableInfo
from spark_sink.ivm.aggregate import ValueOrder
from spark_sink.ivm.catalyst import catalyst_aggregates
from spark_sink.ivm.expressions import agg_state_type, compensated
from spark_sink.ivm.ops.state_table import StateTable
from spark_sink.ivm.state_builds import BuildContext, builds


def aggregate_input(
    ctx: BuildContext, index: int
) -> tuple[DataFrame, list[Column], list[list[Column]]]:
    """The input of the plan's ``index``-th aggregate as a DataFrame, its grouping columns
    (g0, ...) and its aggregate functions' arguments, as Spark Columns, from the query's
    optimized plan."""
    plan = ctx.df._jdf.queryExecution().optimizedPlan()
    child, groups, agg_exprs = catalyst_aggregates(plan)[index]
    child_df = ctx.df_of(child)
    jvm = ctx.session._jvm
    assert jvm is not None  # a classic (non-Connect) session
    to_col = jvm.org.apache.spark.sql.classic.ExpressionUtils.column

    def col(e) -> Column:
        return Column(to_col(e))

    group_cols = [col(e).alias(f"g{i}") for i, e in enumerate(groups)]
    args = []
    for ae in agg_exprs:
        f = ae.aggregateFunction()
        args.append([col(f.children().apply(i)) for i in range(f.children().size())])
    return child_df, group_cols, args


@builds("groups")
def groups_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """The group state of the plan's ``index``-th aggregate, computed by Spark (the layout
    of spark_sink.ivm.state.groups_table)."""
    index = st.index
    agg = ctx.plan.aggs[index]
    child_df, group_cols, all_args = aggregate_input(ctx, index)
    cols = [F.count(F.lit(1)).cast("bigint").alias("nrows")]
    for j, (a, args) in enumerate(zip(agg.aggs, all_args, strict=True)):
        ok = F.lit(True)
        for x in args:
            ok = ok & x.isNotNull()
        t = agg_state_type(a).lower()
        # COUNT, not SUM, of the rows whose arguments are all non-NULL: over no rows at all (a
        # global aggregate's empty input) a SUM is NULL, and the state's count must be 0
        nonnull = F.count(F.when(ok, 1)).cast("bigint")
        if a.kind in ("min", "max"):
            fn = F.min if a.kind == "min" else F.max
            cols += [fn(args[0]).cast(t).alias(f"s{j}"), nonnull.alias(f"n{j}")]
        elif a.distinct:
            n = F.count_distinct(args[0]).cast("bigint").alias(f"n{j}")
            if a.kind == "count":
                cols += [F.lit(0).cast("bigint").alias(f"s{j}"), n]
            else:
                cols += [F.sum_distinct(args[0].cast(t)).cast(t).alias(f"s{j}"), n]
        elif a.kind == "count":
            cols += [F.lit(0).cast("bigint").alias(f"s{j}"), nonnull.alias(f"n{j}")]
        elif t.startswith("decimal") and a.input_dtype.startswith("decimal"):
            cols += [F.sum(F.when(ok, args[0])).cast(t).alias(f"s{j}"), nonnull.alias(f"n{j}")]
        else:
            s_j = F.sum(F.when(ok, args[0].cast(t))).cast(t).alias(f"s{j}")
            cols += [s_j, nonnull.alias(f"n{j}")]
        if compensated(a):  # Spark's sum, replaced by the exact pair below
            cols.append(F.lit(0.0).cast("double").alias(f"c{j}"))
    exact = [j for j, a in enumerate(agg.aggs) if compensated(a)]
    if not group_cols:
        state = child_df.agg(*cols).select(F.lit(0).cast("int").alias("g0"), "*")
        group_cols = [F.lit(0).cast("int").alias("g0")]
    else:
        state = child_df.groupBy(*group_cols).agg(*cols)
    if not exact:
        return state
    # A DOUBLE sum: Spark's batch sum would carry its rounding errors into every later
    # delta; the exact sum rounded to (hi, lo) does not (spark_sink.ivm.exact_sum, loaded
    # here: it needs pandas, which the executors' data source must not load).
    from spark_sink.ivm.exact_sum import exact_sum_columns

    pairs = []
    for j in exact:
        hi, lo = exact_sum_columns(all_args[j][0], agg.aggs[j].distinct)
        pairs += [hi.alias(f"__sv_hi{j}"), lo.alias(f"__sv_lo{j}")]
    sums = child_df.groupBy(*group_cols).agg(*pairs)
    keys = [f"g{i}" for i in range(len(group_cols))]
    sums = sums.select(
        *[F.col(k).alias(f"__sv_{k}") for k in keys],
        *[f"__sv_hi{j}" for j in exact],
        *[f"__sv_lo{j}" for j in exact],
    )
    on = functools.reduce(
        lambda a, b: a & b, [state[k].eqNullSafe(sums[f"__sv_{k}"]) for k in keys]
    )
    joined = state.join(sums, on, "left")
    out = []
    for name in state.columns:
        j = int(name[1:]) if name[0] in "sc" and name[1:].isdigit() else -1
        if j in exact:
            native = F.col(name)
            if name[0] == "s":  # a NaN or an infinity: Spark's value, and rebuilt by deltas
                finite = ~F.isnan(native) & (F.abs(native) < float("inf"))
                out.append(F.when(finite, F.col(f"__sv_hi{j}")).otherwise(native).alias(name))
            else:
                out.append(F.coalesce(F.col(f"__sv_lo{j}"), F.lit(0.0)).alias(name))
        else:
            out.append(F.col(name))
    return joined.select(*out)


@builds("values")
def values_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """The values state of one aggregate function (spark_sink.ivm.state.values_tables):
    per group and distinct non-NULL value, its multiplicity and order key."""
    agg = ctx.plan.aggs[st.index]
    a = agg.aggs[st.call]
    child_df, group_cols, all_args = aggregate_input(ctx, st.index)
    arg = all_args[st.call][0]
    if not group_cols:
        group_cols = [F.lit(0).cast("int").alias("g0")]
    rows = (
        child_df.where(arg.isNotNull())
        .groupBy(*group_cols, arg.alias("v"))
        .agg(F.count(F.lit(1)).cast("bigint").alias("n"))
    )
    order = ValueOrder(info, a.kind == "max")
    names = list(rows.columns)

    def with_order(batches):
        for b in batches:
            o = pa.array([order(v) for v in b.column("v").to_pylist()], pa.binary())
            yield pa.RecordBatch.from_arrays([*b.columns, o], [*names, "o"])

    schema = StructType([*rows.schema.fields, StructField("o", BinaryType())])
    return rows.mapInArrow(with_order, schema)


# ------------------------------------------------------------------ delta
