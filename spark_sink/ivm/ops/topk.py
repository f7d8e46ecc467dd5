"""ORDER BY ... LIMIT n (``plan.TopK``): the first n rows of its input in the query's order,
ties resolved by the whole row.

The state is every input row in order (``spark_sink.ivm.topk_state``: an ordered state table
keyed by the row's order key). The rule: fold the input's change into the touched rows'
multiplicities, read the table's first ``n + d`` rows (``d`` the copies the change deletes), and
emit the new first ``n`` minus the old first ``n``; rows that stay cancel. An epoch's cost
follows the change and ``n``, not the input's size. A TopK is not looked up into (a join above
an ORDER BY ... LIMIT is refused at build) and has no columnar rule (its view takes the row
rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_sink.ivm.expressions import ddl_of
from spark_sink.ivm.ops.operator import (
    Access,
    Operator,
    PkOf,
    Sets,
    ZSet,
    consolidate,
    register,
    sees,
)
from spark_sink.ivm.ops.state_table import StateTable, state_name
from spark_sink.ivm.plan import Expr, TopK, Unsupported
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules


def topk_table(view: str, index: int, node: TopK) -> StateTable:
    """The ordered state of the plan's ``index``-th TopK (pre-order)."""
    cols = ["o BINARY"]
    cols += [f"c{i} {ddl_of(a.dtype)}" for i, a in enumerate(node.child.columns())]
    cols.append("n BIGINT")
    return StateTable(
        state_name(view, f"topk_{index}"), ", ".join(cols), ("o",), "topk", index=index
    )


@register
class TopKOp(Operator[TopK]):
    """The first n rows in order, over an ordered state table of the input."""

    node_type = TopK

    def delta(self, rules: DeltaRules, node: TopK) -> ZSet:
        dz = rules.delta(node.child)
        out = ZSet(tuple(a.id for a in node.columns()))
        change = consolidate(dz.rows, dz.weights)
        if not change:
            return out
        old, new = rules.topks[id(node)].step(change)
        rows = [r for r, _ in new] + [r for r, _ in old]
        weights = [c for _, c in new] + [-c for _, c in old]
        for r, w in consolidate(rows, weights).items():
            out.rows.append(r)
            out.weights.append(w)
        return out

    def lookup_accesses(
        self, node: TopK, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        raise Unsupported(
            "a lookup into ORDER BY ... LIMIT (a join or an aggregate above it) is not "
            "maintained incrementally",
            code="LIMIT",
        )

    def unique_sets(self, node: TopK, pk_of: PkOf) -> Sets:
        return unique_sets(node.child, pk_of)  # a subset of the input's rows

    def expressions(self, node: TopK) -> list[tuple[Expr, dict[int, int], dict | None]]:
        pos = sees(node.child.columns())
        return [(e, pos, None) for e, _, _ in node.order]

    def state_tables(self, node: TopK, view: str, index: int) -> list[StateTable]:
        return [topk_table(view, index, node)]

    def columnar_reason(self, node: TopK) -> str | None:
        return "ORDER BY ... LIMIT"

    def explain(self, node: TopK) -> str:
        return (
            f"TopK (ORDER BY ... LIMIT {node.limit}): the input's rows kept in order in a state "
            f"table; an epoch reads its first {node.limit} rows plus those the change deletes"
        )
