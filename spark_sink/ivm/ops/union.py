"""UNION ALL: the sum of its children's Z-sets.

Delta rule: union is linear, d(A union all B) = dA union all dB. No state.

SQL semantics kept: columns are matched by position (Spark's UNION ALL; its analyzer has already
cast each child's columns to the common type), and the output takes the first child's column
names. Duplicates are kept (weights add); UNION (distinct) is Spark's aggregate over UNION ALL,
not this operator. Nothing is computed on values, so NULLs and overflow do not arise.

The module's operator (``UnionOp``, at its end) has two forms of its rule: over Arrow
(``delta_arrow``/``lookup_arrow``, with the kernels above; children whose stored types agree), which an epoch takes when
every node of the view's tree has one (``delta.columnar_reason``), and row-at-a-time over tuples
(``ops.operator.ZSet``), which takes every other tree and any epoch the Arrow form hands back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_sink.ivm.delta import lookup_accesses
from spark_sink.ivm.ops.arrow_expr import NotColumnar, col_name
from spark_sink.ivm.ops.operator import Access, Operator, PkOf, ZSet, register
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet, concat
from spark_sink.ivm.plan import Node, Union

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules


def union_all(children: Sequence[ArrowZSet]) -> ArrowZSet:
    """The children's rows one after another under the first child's column names; not
    consolidated. ``ValueError`` when their column counts or types differ."""
    if not children:
        raise ValueError("UNION ALL of no inputs")
    names = children[0].table.schema.names
    renamed = []
    for i, c in enumerate(children):
        if c.table.num_columns != len(names):
            raise ValueError(
                f"UNION ALL child {i} has {c.table.num_columns - 1} columns, "
                f"the first {len(names) - 1}"
            )
        renamed.append(ArrowZSet(c.table.rename_columns(names)))
    return concat(renamed)


# ---------------------------------------------------------------------- the row rule


def union_children(node: Union, ids: tuple[int, ...]) -> list[tuple[Node, tuple[int, ...]]]:
    """Each child of a UNION ALL with the columns at the positions of ``ids`` in its result."""
    at = [[a.id for a in node.attrs].index(c) for c in ids]
    return [(child, tuple(child.columns()[i].id for i in at)) for child in node.children]


@register
class UnionOp(Operator[Union]):
    """d(A union all B) = dA union all dB; a lookup reads every child by its own columns."""

    node_type = Union

    def delta(self, rules: DeltaRules, node: Union) -> ZSet:
        out = ZSet(tuple(a.id for a in node.attrs))
        for c in node.children:  # columns match by position
            d = rules.delta(c)
            out.rows += d.rows
            out.weights += d.weights
        return out

    def lookup(
        self, rules: DeltaRules, node: Union, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        out = ZSet(tuple(a.id for a in node.attrs))
        for c, c_ids in union_children(node, ids):
            got = rules.lookup(c, c_ids, values, side)
            out.rows += got.rows
            out.weights += got.weights
        return out

    def lookup_accesses(
        self, node: Union, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        for c, c_ids in union_children(node, ids):
            lookup_accesses(c, c_ids, pk_of, out)

    def columnar_reason(self, node: Union) -> str | None:
        for c in node.children:
            got = tuple(a.dtype for a in c.columns())
            if got != tuple(a.dtype for a in node.attrs):
                return f"a UNION ALL child of types {', '.join(got)}"
        return None

    def delta_arrow(self, rules: DeltaRules, node: Union) -> ArrowZSet:
        return _union_arrow(node, [rules.delta_arrow(c) for c in node.children])

    def lookup_arrow(
        self, rules: DeltaRules, node: Union, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        got = [rules.lookup_arrow(c, c_ids, values, side) for c, c_ids in union_children(node, ids)]
        return _union_arrow(node, got)

    def explain(self, node: Union) -> str:
        return f"UNION ALL of {len(node.children)}: the children's changes together"


def _union_arrow(node: Union, children: list[ArrowZSet]) -> ArrowZSet:
    names = [*(col_name(a.id) for a in node.attrs), WEIGHT]
    out = [ArrowZSet(c.table.rename_columns(names)) for c in children]
    first = out[0].table.schema
    if any(not z.table.schema.equals(first) for z in out[1:]):
        # stored types that differ under one Spark type (none today): the row rule takes it
        raise NotColumnar("UNION ALL children of different Arrow types")
    return concat(out)
