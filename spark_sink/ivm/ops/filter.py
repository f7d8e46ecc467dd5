"""Filter (SQL WHERE, HAVING): keep the rows whose predicate is TRUE.

Delta rule: filter is linear, d(filter(R)) = filter(dR); the changed rows are filtered and keep
their weights, and no state is read or kept.

SQL semantics kept: a row is kept only where the predicate is TRUE; FALSE and NULL drop it
(three-valued logic, as WHERE). The predicate's own arithmetic is the caller's kernel choice:
Spark ANSI raises on BIGINT overflow, so a predicate computing sums uses pyarrow's ``*_checked``
kernels, which raise ``pyarrow.ArrowInvalid`` instead of wrapping. Arrow's float comparisons
are IEEE's (NaN compares false with everything) while Spark orders NaN above every other value
and NaN = NaN is true: a converter maps Spark's comparisons of DOUBLE/FLOAT to a callable (or an
expression that handles NaN), never to Arrow's kernels as they are.

The module's operator (``FilterOp``, at its end) has two forms of its rule: over Arrow
(``delta_arrow``/``lookup_arrow``, with the kernels above; the condition translated by ``ops.arrow_expr``), which an epoch takes when
every node of the view's tree has one (``delta.columnar_reason``), and row-at-a-time over tuples
(``ops.operator.ZSet``), which takes every other tree and any epoch the Arrow form hands back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

from spark_sink.ivm.ops.arrow_expr import NotColumnar, arrow_expr
from spark_sink.ivm.ops.operator import Operator, PkOf, Sets, ZSet, register, sees
from spark_sink.ivm.ops.zset import ArrowZSet
from spark_sink.ivm.plan import Expr, Filter
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules

# a pyarrow compute Expression, or a callable over the data table
Predicate: TypeAlias = "pc.Expression | Callable[[pa.Table], pa.Array | pa.ChunkedArray]"


@dataclass(frozen=True)
class FilterSpec:
    """``predicate``: a pyarrow compute Expression over the data columns, or a callable from the
    data table to a boolean array of its length (for what Arrow's kernels do not evaluate the
    way Spark does)."""

    predicate: Predicate


def apply_filter(spec: FilterSpec, z: ArrowZSet) -> ArrowZSet:
    """The rows of ``z`` whose predicate is TRUE, weights kept; not consolidated."""
    if isinstance(spec.predicate, pc.Expression):
        # In this thread: Table.filter hands an expression to Acero's thread pool, whose
        # hand-offs cost more than a small change's filter does
        plan = acero.Declaration.from_sequence(
            [
                acero.Declaration("table_source", acero.TableSourceNodeOptions(z.table)),
                acero.Declaration("filter", acero.FilterNodeOptions(spec.predicate)),
            ]
        )
        return ArrowZSet(plan.to_table(use_threads=False))
    mask = spec.predicate(z.data)
    if len(mask) != len(z) or not pa.types.is_boolean(mask.type):
        raise ValueError(
            f"a filter predicate returned {mask.type} of length {len(mask)} for {len(z)} rows"
        )
    return ArrowZSet(z.table.filter(mask, null_selection_behavior="drop"))


# ---------------------------------------------------------------------- the row rule


def filter_rows(rules: DeltaRules, node: Filter, z: ZSet) -> ZSet:
    """The rows of ``z`` where ``node.cond`` is TRUE (Spark's evaluator), weights kept."""
    f = rules.compiled(id(node), node.cond, z.pos())
    out = ZSet(z.ids)
    for r, w in zip(z.rows, z.weights, strict=True):
        if f(r) is True:
            out.rows.append(r)
            out.weights.append(w)
    return out


@register
class FilterOp(Operator[Filter]):
    """d(filter(R)) = filter(dR); a lookup filters the rows its input's lookup read."""

    node_type = Filter

    def delta(self, rules: DeltaRules, node: Filter) -> ZSet:
        return filter_rows(rules, node, rules.delta(node.child))

    def lookup(
        self, rules: DeltaRules, node: Filter, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        return filter_rows(rules, node, rules.lookup(node.child, ids, values, side))

    def unique_sets(self, node: Filter, pk_of: PkOf) -> Sets:
        return unique_sets(node.child, pk_of)

    def expressions(self, node: Filter) -> list[tuple[Expr, dict[int, int], dict | None]]:
        return [(node.cond, sees(node.child.columns()), None)]

    def columnar_reason(self, node: Filter) -> str | None:
        try:
            arrow_expr(node.cond, {a.id: a for a in node.child.columns()})
        except NotColumnar as e:
            return f"a filter on {e}"
        return None

    def delta_arrow(self, rules: DeltaRules, node: Filter) -> ArrowZSet:
        return _filter_arrow(node, rules.delta_arrow(node.child))

    def lookup_arrow(
        self, rules: DeltaRules, node: Filter, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        return _filter_arrow(node, rules.lookup_arrow(node.child, ids, values, side))

    def explain(self, node: Filter) -> str:
        return "Filter: the changed rows where the condition is TRUE"


def _filter_arrow(node: Filter, z: ArrowZSet) -> ArrowZSet:
    pred = arrow_expr(node.cond, {a.id: a for a in node.child.columns()})
    return apply_filter(FilterSpec(pred), z)
