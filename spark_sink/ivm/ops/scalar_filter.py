"""A filter that reads uncorrelated scalar subqueries (``plan.ScalarFilter``: ``WHERE x >
(SELECT AVG(y) FROM t)``, TPC-H q11, q15, q22).

Each subquery is a global aggregate kept incrementally like any other (its group state, one
row). While every subquery's value stays, the filter is linear: its change is the child's change
filtered at those values (read by key from the aggregates' state). When one moves, any row of
the child may change its answer, and no keyed read finds just the rows between the old and the
new value; that epoch raises ``NeedsBuild``, so it is a build (the view and its state recomputed
on Spark, as at a first barrier), which costs a full recompute for that epoch only. Which one
is cheaper, re-reading the child or a build, depends on the child; a build needs no new read
path and is what ``auto`` would choose for a change that touches every row. The subqueries'
values move only when their own inputs change (under TPC-H's refresh functions, q11's and q22's
never do; q15's when the best supplier's revenue does).

Row-at-a-time only (``columnar_reason`` names it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_sink.ivm.ops.operator import (
    NEW,
    Access,
    NeedsBuild,
    Operator,
    PkOf,
    Sets,
    ZSet,
    consolidate,
    register,
    sees,
)
from spark_sink.ivm.plan import Expr, ScalarFilter
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules


def _pos(node: ScalarFilter) -> dict[int, int]:
    """The condition's columns: the child's, then each subquery's value."""
    return sees(node.child.columns() + tuple(s.columns()[0] for s in node.subs))


def _values(rules: DeltaRules, node: ScalarFilter, side: str) -> tuple:
    """Each subquery's value at ``side`` (its aggregate's one row, read by key)."""
    out = []
    for s in node.subs:
        z = rules.lookup(s, (), {()}, side)
        out.append(z.rows[0][0] if z.rows else None)
    return tuple(out)


def _filter(rules: DeltaRules, node: ScalarFilter, z: ZSet, values: tuple, out: ZSet) -> None:
    f = rules.compiled(id(node), node.cond, _pos(node))
    for r, w in zip(z.rows, z.weights, strict=True):
        if f(r + values) is True:
            out.rows.append(r)
            out.weights.append(w)


@register
class ScalarFilterOp(Operator[ScalarFilter]):
    """The child's change filtered at the subqueries' values; a build when one moves."""

    node_type = ScalarFilter

    def delta(self, rules: DeltaRules, node: ScalarFilter) -> ZSet:
        dz = rules.delta(node.child)
        for s in node.subs:  # every subquery's state follows its inputs each epoch
            ds = rules.delta(s)
            if consolidate(ds.rows, ds.weights):
                raise NeedsBuild(
                    "the value of a scalar subquery changed: every row its condition reads "
                    "is decided again by a build"
                )
        out = ZSet(tuple(a.id for a in node.columns()))
        if len(dz):
            _filter(rules, node, dz, _values(rules, node, NEW), out)
        return out

    def lookup(
        self,
        rules: DeltaRules,
        node: ScalarFilter,
        ids: tuple[int, ...],
        values: set[tuple],
        side: str,
    ) -> ZSet:
        z = rules.lookup(node.child, ids, values, side)
        out = ZSet(tuple(a.id for a in node.columns()))
        _filter(rules, node, z, _values(rules, node, side), out)
        return out

    def lookup_accesses(
        self, node: ScalarFilter, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        from spark_sink.ivm.delta import lookup_accesses

        lookup_accesses(node.child, ids, pk_of, out)  # a global aggregate reads its own state

    def unique_sets(self, node: ScalarFilter, pk_of: PkOf) -> Sets:
        return unique_sets(node.child, pk_of)

    def expressions(self, node: ScalarFilter) -> list[tuple[Expr, dict[int, int], dict | None]]:
        return [(node.cond, _pos(node), None)]

    def columnar_reason(self, node: ScalarFilter) -> str | None:
        return "a scalar subquery"

    def explain(self, node: ScalarFilter) -> str:
        return (
            f"Filter over {len(node.subs)} scalar subquer{'y' if len(node.subs) == 1 else 'ies'}: "
            "the changed rows filtered at the subqueries' values; an epoch in which one moves "
            "is a build"
        )
