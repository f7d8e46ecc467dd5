"""Build-time analysis of a view for incremental maintenance: the delta-rule tree, the keyed
reads it makes, the state tables it keeps, and a fingerprint that changes with any of them
(a job restarted with a different query rebuilds its view and state at its next barrier)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from kvstore.table_info import TableInfo
from spark_sink.ivm.catalyst import delta_plan
from spark_sink.ivm.delta import plan_accesses
from spark_sink.ivm.expressions import compile_expr
from spark_sink.ivm.ops.operator import Access, operator_for
from spark_sink.ivm.ops.scan import index_table
from spark_sink.ivm.ops.semi_join import PAIRS
from spark_sink.ivm.ops.state_table import StateTable
from spark_sink.ivm.plan import (
    Aggregate,
    Node,
    TopK,
    Unsupported,
    Window,
    aggregates,
    scans,
    top_k_root,
    walk,
)

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
EXCLUDED = "spark.sql.optimizer.excludedRules"
DECIMAL_AGGREGATES = "org.apache.spark.sql.catalyst.optimizer.DecimalAggregates"
PLAN_VERSION = 2  # bump when the meaning of state tables changes: every view then rebuilds


@dataclass(frozen=True)
class IncrementalPlan:
    root: Node
    aggs: tuple[Aggregate, ...]  # the tree's aggregates, pre-order
    accesses: tuple[Access, ...]
    state: tuple[StateTable, ...]
    fingerprint: str

    def groups_tables(self) -> list[StateTable]:
        return [s for s in self.state if s.role == "groups"]

    def index_tables(self) -> list[StateTable]:
        return [s for s in self.state if s.role == "index"]

    def matches_tables(self) -> list[StateTable]:
        return [s for s in self.state if s.role == "matches"]

    def exists_tables(self) -> list[StateTable]:
        return [s for s in self.state if s.role == "exists"]

    def topk_tables(self) -> list[StateTable]:
        return [s for s in self.state if s.role == "topk"]

    def values_tables(self, index: int) -> dict[int, StateTable]:
        """The values state tables of the ``index``-th aggregate, by aggregate function."""
        return {s.call: s for s in self.state if s.role == "values" and s.index == index}

    def describe(self) -> list[str]:
        """Lines for ``explain()``: which input is read by which key, and the state tables."""
        lines = []
        seen = []
        for s in scans(self.root):
            if s.table not in seen:
                seen.append(s.table)
                lines.append(f"changes of {s.table}: its change index between two barriers")
        for a in self.accesses:
            if a.kind == "pk":
                lines.append(f"lookup {a.table} by ({', '.join(a.columns)}): its primary key")
            elif a.kind == "prefix":
                lines.append(
                    f"lookup {a.table} by ({', '.join(a.columns)}): a range of its primary key "
                    f"by its leading ({', '.join(a.prefix)})"
                )
            else:
                st = next(
                    x
                    for x in self.index_tables()
                    if (x.source, x.column) == (a.table, a.index_column)
                )
                lines.append(f"lookup {a.table} by {a.index_column}: index state table {st.name}")
        for w in walk(self.root):
            if isinstance(w, Window):
                lines.append(operator_for(w).explain(w))
        for i, (agg, g) in enumerate(zip(self.aggs, self.groups_tables(), strict=True)):
            kind = "global aggregate" if not agg.groups else "aggregate"
            lines.append(f"{kind}: affected groups read by key from state table {g.name}")
            for j, v in sorted(self.values_tables(i).items()):
                call = agg.aggs[j]
                what = f"{call.kind.upper()}({'DISTINCT ' if call.distinct else ''}...)"
                how = (
                    "a value's multiplicity read by key; a group whose extreme goes re-reads "
                    "its first values in order"
                    if call.kind in ("min", "max")
                    else "a value's multiplicity read by key; it counts while positive"
                )
                lines.append(f"{what}: {how}, from state table {v.name}")
        for st in self.matches_tables():
            lines.append(
                f"outer join {st.index}, {st.column} side: a touched key's match count read by "
                f"key from state table {st.name}; its padded rows read by key only where the "
                "count crosses 0"
            )
        for st in self.exists_tables():
            if st.column == PAIRS:
                lines.append(
                    f"semi or anti join {st.index}: per (key, value) of its <> column, the count "
                    f"of right rows read by key from state table {st.name}; the left rows of a "
                    "key whose right rows changed read by key at the new barrier"
                )
                continue
            lines.append(
                f"semi or anti join {st.index}: a touched key's count of right rows read by key "
                f"from state table {st.name}; its left rows read by key only where the count "
                "crosses 0"
            )
        for st in self.state:
            lines.append(f"state: {st.describe()}")
        return lines


# The order of the plan's state tables (it enters the fingerprint): every aggregate's, then every
# join's, then the indexes, each in pre-order, as before the operators declared them.
_ROLE_ORDER = {"groups": 0, "values": 0, "matches": 1, "exists": 1, "index": 2, "topk": 3}


def _state_tables(root: Node, view: str) -> list[StateTable]:
    """The state tables the operators of ``root``'s tree declare, each node numbered among the
    nodes of its type in pre-order."""
    seen: dict[type, int] = {}
    out: list[StateTable] = []
    for n in walk(root):
        i = seen[type(n)] = seen.get(type(n), -1) + 1
        out += operator_for(n).state_tables(n, view, i)
    return sorted(out, key=lambda st: _ROLE_ORDER[st.role])


def _check_top_k(root: Node) -> None:
    """ORDER BY ... LIMIT only at the top of the query (under nothing but projections): the
    build writes such a view from its ordered state, so the rows it keeps among ties are the
    ones the epochs start from; anywhere else Spark's own pick would reach the view."""
    found = top_k_root(root)
    top = found[0] if found else None
    for n in walk(root):
        if isinstance(n, TopK) and n is not top:
            raise Unsupported(
                "ORDER BY ... LIMIT below a filter, join, aggregate or union is not maintained "
                "incrementally",
                code="LIMIT",
            )


def _check_expressions(root: Node) -> None:
    """Compile every expression once, so one this engine cannot evaluate is refused at build."""
    for n in walk(root):
        for expr, pos, env in operator_for(n).expressions(n):
            compile_expr(expr, pos, env)


def analyze(
    session: SparkSession,
    query: str,
    view: str,
    infos: dict[str, TableInfo],
    column_names: list[str] | None,
    primary_key: tuple[str, ...],
    one_row: bool,
) -> tuple[IncrementalPlan, DataFrame]:
    """The IncrementalPlan of ``query`` (its sources registered in ``session``), or raises
    Unsupported naming the construct that is not maintained incrementally."""
    # DecimalAggregates rewrites SUM/AVG of a small DECIMAL into a sum of unscaled longs; the
    # delta rules want the aggregate as written (and the build's state uses the same plan).
    session.conf.set(EXCLUDED, DECIMAL_AGGREGATES)
    before = session.conf.get(PUSHDOWN, "false") or "false"
    session.conf.set(PUSHDOWN, "false")  # a filter the source absorbed would vanish
    try:
        df = session.sql(query)
        root = delta_plan(df)
    finally:
        session.conf.set(PUSHDOWN, before)
    _check_top_k(root)
    for s in scans(root):
        if s.table not in infos:
            raise Unsupported(f"table {s.table} is not a source of the view", code="SOURCE")
    aggs = aggregates(root)

    def pk_of(t: str) -> tuple[str, ...]:
        return infos[t].user_key

    for s in scans(root):
        if not pk_of(s.table):
            raise Unsupported(
                f"table {s.table} has no primary key (append-only); its rows cannot be looked up "
                "by key",
                code="SOURCE",
            )
    accesses = list(dict.fromkeys(plan_accesses(root, pk_of)))
    _check_expressions(root)
    state = _state_tables(root, view)
    for a in accesses:
        if a.kind == "index":
            ts = infos[a.table].table_schema
            ddl = {c.name: c.type.ddl() for c in ts.columns}
            st = index_table(view, a, ddl, tuple(infos[a.table].primary_key))
            if st not in state:
                state.append(st)
    fp = hashlib.sha256(
        json.dumps(
            [
                PLAN_VERSION,
                query,
                list(column_names or ()),
                list(primary_key),
                one_row,
                [(s.name, s.ddl, s.primary_key) for s in state],
            ]
        ).encode()
    ).hexdigest()[:16]
    return IncrementalPlan(root, tuple(aggs), tuple(accesses), tuple(state), fp), df
