"""Aggregate: fold a weighted change into per-group deltas of COUNT(*), SUM(x) and COUNT(x).

Delta rule: COUNT and SUM are linear in the Z-set, so per group g

    d COUNT(*)  = sum of w            over the changed rows of g
    d COUNT(x)  = sum of w            over those whose x is not NULL
    d SUM(x)    = sum of x * w        over those whose x is not NULL

``fold_changes`` computes these for a whole batch in one vectorized hash group-by and returns one
row per group it touched (groups whose deltas are all 0 dropped); the caller adds them to its
stored group state (``add_group_deltas`` adds two such tables the same way). From the state the
output follows as in SQL: a group with COUNT(*) 0 has no row (a global aggregate keeps its one
row), and SUM(x) is NULL while COUNT(x) is 0.

SQL semantics kept: GROUP BY puts all NULL keys in one group; floating point group keys are
normalized (NaN one group, -0.0 with 0.0), as Spark's grouping; NULL inputs do not enter SUM or
COUNT(x). Sums are exact over integral inputs (TINYINT to BIGINT, summed as BIGINT as Spark's
SUM): every product and per-group sum is computed without wrapping (DECIMAL(38,0) when int64
might overflow) and ``WeightOverflow`` is raised, naming the column, when a group's delta does
not fit BIGINT; ``add_group_deltas`` raises it when a group's new sum leaves BIGINT, where Spark
ANSI raises ARITHMETIC_OVERFLOW. (A delta that leaves BIGINT while the stored sum plus it would
not is also refused: the caller treats it as a rebuild.)

Used by the columnar aggregate path (``spark_sink.ivm.aggregate_columnar``), which adds the
stored state, AVG's division of an integral sum and the output rows. Not handled here yet (on
the row-at-a-time engine, ``spark_sink.ivm.aggregate``, until ported): exact DOUBLE/FLOAT sums (Spark's order-dependent rounding; today a compensated pair),
DECIMAL sums and their precision rules, AVG of DECIMAL, SUM(DISTINCT x), and FILTER clauses.
MIN/MAX and COUNT(DISTINCT x) need per-value state: ``minmax.py`` and ``distinct.py``. ``fold_changes`` refuses non-integral SUM inputs with
``TypeError``.

The module's operator (``AggregateOp``, at its end) is what maintains views today: the row rule
over tuples (``ops.operator.ZSet``), registered for its plan node. The Arrow kernels above it
are its columnar form, wired in through ``spark_sink.ivm.aggregate_columnar``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.delta import columnar_reason
from spark_sink.ivm.expressions import agg_state_type, compensated, ddl_of, keeps_values
from spark_sink.ivm.ops.arrow_expr import HANDED_BACK, col_name
from spark_sink.ivm.ops.operator import Access, Operator, PkOf, Sets, ZSet, register, sees
from spark_sink.ivm.ops.state_table import StateTable, state_name
from spark_sink.ivm.plan import (
    Aggregate,
    Col,
    Expr,
    GroupRef,
    Node,
    Project,
    Scan,
    Unsupported,
)

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules

from spark_sink.ivm.ops.zset import (
    WEIGHT,
    ArrowZSet,
    exact_group_sum,
    normalized_keys,
)

COUNT = "__count"


def sum_column(x: str) -> str:
    """The name of SUM(x)'s delta in ``fold_changes``'s output."""
    return f"__sum_{x}"


def nonnull_column(x: str) -> str:
    """The name of COUNT(x)'s delta in ``fold_changes``'s output."""
    return f"__nonnull_{x}"


@dataclass(frozen=True)
class AggregateSpec:
    """GROUP BY ``group_by`` (empty: a global aggregate) with COUNT(*) and, per column of
    ``sums``, SUM(x) and COUNT(x)."""

    group_by: tuple[str, ...]
    sums: tuple[str, ...] = ()

    def delta_columns(self) -> list[str]:
        out = [COUNT]
        for x in self.sums:
            out += [sum_column(x), nonnull_column(x)]
        return out


def fold_changes(spec: AggregateSpec, z: ArrowZSet) -> pa.Table:
    """Per group of ``spec.group_by`` that ``z`` touches: the deltas of COUNT(*) (``__count``),
    SUM(x) (``__sum_x``) and COUNT(x) (``__nonnull_x``), int64 (a SUM of a DECIMAL(38,0) x may
    be DECIMAL(38,0)); the group key columns first. Each x holds integers: an integral column,
    or DECIMAL(38,0) (a DECIMAL's unscaled values).
    Groups whose deltas are all 0 are left out (for a global aggregate, an empty table then)."""
    keys = list(spec.group_by)
    t = normalized_keys(z.table.select([*keys, WEIGHT]), keys)
    w = z.weights
    cols: dict[str, pa.ChunkedArray | pa.Array] = {COUNT: w}
    for x in spec.sums:
        v = z.table[x]
        if v.type == pa.decimal128(38, 0):  # integers past int64 (a DECIMAL's unscaled values)
            prod = _product_38(v, w)
        elif pa.types.is_integer(v.type):
            v = pc.cast(v, pa.int64())
            try:
                prod = pc.multiply_checked(v, w)
            except pa.ArrowInvalid:
                # x * w leaves int64: DECIMAL(38,0) holds any product of two int64 values
                # (|x * w| <= 2**126 < 10**38)
                prod = _product_38(v, w)
        else:
            raise TypeError(f"SUM({x}) over {v.type}: integers only (int64 or DECIMAL(38,0))")
        present = pc.is_valid(v)
        cols[sum_column(x)] = pc.if_else(present, prod, pa.scalar(0, prod.type))
        cols[nonnull_column(x)] = pc.if_else(present, w, 0)
    for name, col in cols.items():
        t = t.append_column(name, col)
    t = t.drop_columns([WEIGHT])
    delta = spec.delta_columns()
    # a DECIMAL's unscaled sum may leave int64 where Spark's DECIMAL(p+10, s) holds it
    big = frozenset(sum_column(x) for x in spec.sums if z.table[x].type == pa.decimal128(38, 0))
    out = exact_group_sum(t, keys, delta, big)
    return _drop_zero_groups(out, delta)


def _product_38(
    v: pa.ChunkedArray | pa.Array, w: pa.ChunkedArray | pa.Array
) -> pa.ChunkedArray | pa.Array:
    """``v * w`` (integers, int64 or DECIMAL(38,0), times int64 weights) as DECIMAL(38,0):
    multiplied in 256 bits (Arrow types the product past 38 digits), cast back, which raises
    ``ArrowInvalid`` where a product leaves 38 digits."""
    d38, d19 = pa.decimal256(38, 0), pa.decimal256(19, 0)
    return pc.cast(pc.multiply(pc.cast(v, d38), pc.cast(w, d19)), pa.decimal128(38, 0))


def add_group_deltas(spec: AggregateSpec, state: pa.Table, delta: pa.Table) -> pa.Table:
    """``state`` plus ``delta``, both shaped as ``fold_changes``'s output, per group (the same
    grouping equality); groups whose columns all reach 0 are dropped (a global aggregate's empty
    state is its row with COUNT 0 and SUM NULL, which the caller emits). ``WeightOverflow`` when
    a group's COUNT or SUM leaves BIGINT (Spark ANSI's ARITHMETIC_OVERFLOW)."""
    keys = list(spec.group_by)
    both = pa.concat_tables([state, delta])
    out = exact_group_sum(normalized_keys(both, keys), keys, spec.delta_columns())
    return _drop_zero_groups(out, spec.delta_columns())


def _drop_zero_groups(t: pa.Table, columns: list[str]) -> pa.Table:
    nonzero = None
    for c in columns:
        m = pc.not_equal(t[c], 0)
        nonzero = m if nonzero is None else pc.or_(nonzero, m)
    return t if nonzero is None else t.filter(nonzero)


# ---------------------------------------------------------------------- the operator


def group_positions(node: Aggregate, ids: tuple[int, ...]) -> list[tuple[int, int]]:
    """(position in ids, grouping expression index) for each of ``ids`` that is a plain output
    of a grouping expression; every grouping expression must be among them, else Unsupported."""
    src = {a.id: e for a, e in node.outputs}
    out = []
    for i, c in enumerate(ids):
        e = src[c]
        if isinstance(e, GroupRef):
            out.append((i, e.index))
    if {g for _, g in out} != set(range(len(node.groups))):
        raise Unsupported(
            "a join with an aggregate on other than all its grouping columns is not maintained "
            "incrementally",
            code="JOIN",
        )
    return out


def plain_source(node: Node) -> tuple[Scan, list[str]] | None:
    """(the source, the source column of each output column of ``node``) when ``node`` is a
    Scan, or Projects of plain column copies over one; None otherwise."""
    if isinstance(node, Scan):
        return node, [a.name for a in node.attrs]
    if isinstance(node, Project):
        below = plain_source(node.child)
        if below is None:
            return None
        scan, names = below
        by_id = dict(zip((a.id for a in node.child.columns()), names, strict=True))
        out = []
        for _, e in node.outputs:
            if not isinstance(e, Col) or e.id not in by_id:
                return None
            out.append(by_id[e.id])
        return scan, out
    return None


# ---------------------------------------------------------------------- state tables


def _group_key(agg: Aggregate) -> tuple[list[str], tuple[str, ...]]:
    """A group state table's key columns (their DDL) and key: g0, g1, ... of the grouping
    expressions' types, or one INT g0 (the one group, key 0) for a global aggregate."""
    if agg.groups:
        cols = [f"g{i} {ddl_of(t)}" for i, t in enumerate(agg.group_dtypes)]
        return cols, tuple(f"g{i}" for i in range(len(agg.groups)))
    return ["g0 INT"], ("g0",)


def groups_table(view: str, agg: Aggregate, index: int = 0) -> StateTable:
    """The group state of the ``index``-th aggregate of the plan (pre-order)."""
    cols, pk = _group_key(agg)
    cols.append("nrows BIGINT")
    for j, a in enumerate(agg.aggs):
        cols += [f"s{j} {agg_state_type(a)}", f"n{j} BIGINT"]
        if compensated(a):
            cols.append(f"c{j} DOUBLE")
    what = "groups" if index == 0 else f"groups_{index}"
    return StateTable(state_name(view, what), ", ".join(cols), pk, "groups", index=index)


def values_tables(view: str, agg: Aggregate, index: int = 0) -> list[StateTable]:
    """Per aggregate function that keeps its values (expressions.keeps_values): the multiset of
    its non-NULL input values per group. Key: the group's columns, then ``o``, the value's
    memcomparable encoding (complemented for MAX, so a group's first key is its extreme);
    columns ``v`` (the value) and ``n`` (its multiplicity, > 0)."""
    out = []
    for j, a in enumerate(agg.aggs):
        if not keeps_values(a):
            continue
        cols, pk = _group_key(agg)
        cols += ["o BINARY", f"v {ddl_of(a.input_dtype)}", "n BIGINT"]
        what = f"values_{index}_{j}"
        out.append(
            StateTable(
                state_name(view, what), ", ".join(cols), (*pk, "o"), "values", index=index, call=j
            )
        )
    return out


@register
class AggregateOp(Operator[Aggregate]):
    """The child's change folded per group into the group state table (the epoch's
    ``AggregateState`` for this node, ``rules.aggregates``: the columnar path where
    ``aggregate_columnar.columnar_reason`` allows, else the row path); its output change is each
    touched group's old row retracted and its new row emitted. A lookup reads group states by
    key (this epoch's new state of a group it changed, else the stored one)."""

    node_type = Aggregate

    def delta(self, rules: DeltaRules, node: Aggregate) -> ZSet:
        state = rules.aggregates[id(node)]
        src = plain_source(node.child)
        if src is not None:  # the change of a source's columns: taken as Arrow where that helps
            return state.delta_of_scan(rules, node, node.child, *src)
        if state.why_rows is None and columnar_reason(node.child) is None:
            # the child's tree runs over Arrow (a join, say) and the fold takes its change so
            try:
                z = rules.delta_arrow(node.child)
            except HANDED_BACK:
                pass  # the child's row rules take it
            else:
                names = [col_name(a.id) for a in node.child.columns()]
                weights = z.weights.combine_chunks()
                return state.delta_of_arrow(rules, node, node.child, z.data, weights, names)
        return state.delta(rules, node, rules.delta(node.child))

    def lookup(
        self,
        rules: DeltaRules,
        node: Aggregate,
        ids: tuple[int, ...],
        values: set[tuple],
        side: str,
    ) -> ZSet:
        gpos = group_positions(node, ids)
        groups = {tuple(v[i] for i, _ in gpos) for v in values}
        rules.lookups += len(groups)
        rows = rules.aggregates[id(node)].lookup(rules, node, [g for _, g in gpos], groups, side)
        return ZSet(tuple(a.id for a in node.columns()), rows, [1] * len(rows))

    def lookup_accesses(
        self, node: Aggregate, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        group_positions(node, ids)  # the group state is read by key: no access of a source

    def unique_sets(self, node: Aggregate, pk_of: PkOf) -> Sets:
        at = {e.index: a.id for a, e in node.outputs if isinstance(e, GroupRef)}
        if all(i in at for i in range(len(node.groups))):
            return [frozenset(at[i] for i in range(len(node.groups)))]
        return []

    def expressions(self, node: Aggregate) -> list[tuple[Expr, dict[int, int], dict | None]]:
        pos = sees(node.child.columns())
        out: list[tuple[Expr, dict[int, int], dict | None]] = [(g, pos, None) for g in node.groups]
        out += [(x, pos, None) for a in node.aggs for x in a.args]
        n = len(node.groups)
        env = {"groups": list(range(n)), "aggs": list(range(n, n + len(node.aggs)))}
        out += [(e, {}, env) for _, e in node.outputs]
        return out

    def state_tables(self, node: Aggregate, view: str, index: int) -> list[StateTable]:
        return [groups_table(view, node, index), *values_tables(view, node, index)]

    def explain(self, node: Aggregate) -> str:
        fns = ", ".join(
            f"{a.kind.upper()}({'DISTINCT ' if a.distinct else ''}...)" for a in node.aggs
        )
        kind = "global aggregate" if not node.groups else "Aggregate"
        return f"{kind} {fns}: the change folded into the touched groups' kept state"
