"""The ordered state of an ORDER BY ... LIMIT built on Spark (``topk``,
``spark_sink.ivm.topk_state``: the layout): every row of the input of the query's own Sort, its
order key computed on the executors by the code the epochs use, counted per key."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from kvstore.table_info import TableInfo
from spark_sink.ivm.catalyst import catalyst_top_ks
from spark_sink.ivm.expressions import ddl_of
from spark_sink.ivm.ops.state_table import STATE_INFIX, StateTable
from spark_sink.ivm.plan import Node, TopK, top_k_root, walk
from spark_sink.ivm.state_builds import BuildContext, builds


@builds("topk")
def topk_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """Per distinct input row of the plan's ``st.index``-th TopK: its order key ``o``, its
    columns ``c0, ...`` and its multiplicity ``n``. Rows are told apart by ``o`` (their bytes),
    not by Spark's grouping, which would merge -0.0 with 0.0 where the epochs do not."""
    node = [n for n in walk(ctx.plan.root) if isinstance(n, TopK)][st.index]
    sort = catalyst_top_ks(ctx.df._jdf.queryExecution().optimizedPlan())[st.index]
    attrs = node.child.columns()
    names = [f"c{i}" for i in range(len(attrs))]
    rows = ctx.df_of(sort.child()).toDF(*names)  # names may repeat
    rows = rows.select(
        *[
            F.col(c).cast(ddl_of(a.dtype).lower()).alias(c)
            for c, a in zip(names, attrs, strict=True)
        ]
    )
    view = st.name.split(STATE_INFIX)[0]

    def with_order(batches):
        from spark_sink.ivm.topk_state import TopKOrder  # on the executor

        order = TopKOrder(node, view)
        for b in batches:
            cols = [b.column(i).to_pylist() for i in range(b.num_columns)]
            o = pa.array([order(r) for r in zip(*cols, strict=True)], pa.binary())
            yield pa.RecordBatch.from_arrays([o, *b.columns], ["o", *names])

    schema = StructType([StructField("o", BinaryType()), *rows.schema.fields])
    keyed = rows.mapInArrow(with_order, schema)
    return keyed.groupBy("o").agg(
        *[F.first(c).alias(c) for c in names], F.count(F.lit(1)).cast("bigint").alias("n")
    )


def topk_view_df(state: DataFrame, root: Node, schema: StructType) -> DataFrame:
    """The view of a query whose top is ORDER BY ... LIMIT (``top_k_root``), from its built
    ordered state (``topk_df``): the first ``limit`` copies in order, the Projects above it
    applied on the executors by the row evaluator. Spark's own LIMIT picks among tied rows
    arbitrarily; this pick is the one the epochs' rule starts from (ties by the whole row)."""
    found = top_k_root(root)
    assert found is not None
    node, projects = found
    names = [f"c{i}" for i in range(len(node.child.columns()))]
    first = (
        state.select("o", *names, F.explode(F.sequence(F.lit(1), F.col("n"))).alias("__copy"))
        .orderBy("o", "__copy")
        .limit(node.limit)
        .select(*names)
    )
    chain = list(reversed(projects))  # innermost first

    def project(batches):
        from pyspark.sql.pandas.types import to_arrow_schema

        from spark_sink.ivm.expressions import compile_expr
        from spark_sink.ivm.ops.operator import sees

        steps = []
        for p in chain:
            pos = sees(p.child.columns())
            steps.append([compile_expr(e, pos) for _, e in p.outputs])
        arrow = to_arrow_schema(schema)
        for b in batches:
            rows = list(zip(*(b.column(i).to_pylist() for i in range(b.num_columns)), strict=True))
            for fns in steps:
                rows = [tuple(f(r) for f in fns) for r in rows]
            cols = list(zip(*rows, strict=True)) if rows else [()] * len(arrow)
            yield pa.RecordBatch.from_arrays(
                [pa.array(list(c), f.type) for c, f in zip(cols, arrow, strict=True)],
                schema=arrow,
            )

    return first.mapInArrow(project, schema)
