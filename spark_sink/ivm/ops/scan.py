"""Scan: a source table, the leaf of every plan.

Delta rule: the table's change between the two barriers, read from its change index
(``Inputs.changes``: each changed key's old row retracted, its new row emitted). Lookup: the
table's rows at one barrier whose columns equal given values, read by key (``Access``: point
reads when the columns cover the primary key, else through the index state table the view job
keeps on the first of them). Keeps no state of its own; its result is unique on its primary key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_sink.ivm.ops.operator import (
    Access,
    Inputs,
    Operator,
    PkOf,
    Sets,
    ZSet,
    choose_access,
    columns_of,
    register,
)
from spark_sink.ivm.plan import Attr, Scan

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules


def pick(inputs: Inputs, table: str, attrs: tuple[Attr, ...], rows: list[tuple]) -> list[tuple]:
    """``rows`` (full rows of ``table`` in column order) cut to the columns ``attrs``."""
    cols = inputs.columns(table)
    return columns_of(rows, [cols.index(a.name) for a in attrs], len(cols))


@register
class ScanOp(Operator[Scan]):
    node_type = Scan

    def delta(self, rules: DeltaRules, node: Scan) -> ZSet:
        rows, weights = rules.inputs.changes(node.table)
        ids = tuple(a.id for a in node.attrs)
        return ZSet(ids, pick(rules.inputs, node.table, node.attrs, rows), weights)

    def lookup(
        self, rules: DeltaRules, node: Scan, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        names = {a.id: a.name for a in node.attrs}
        cols = tuple(names[i] for i in ids)
        access = choose_access(node.table, cols, rules.inputs.primary_key(node.table))
        rules.lookups += len(values)
        rows = rules.inputs.fetch(access, side, values)
        out_ids = tuple(a.id for a in node.attrs)
        return ZSet(out_ids, pick(rules.inputs, node.table, node.attrs, rows), [1] * len(rows))

    def lookup_accesses(
        self, node: Scan, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        names = {a.id: a.name for a in node.attrs}
        out.append(choose_access(node.table, tuple(names[i] for i in ids), pk_of(node.table)))

    def unique_sets(self, node: Scan, pk_of: PkOf) -> Sets:
        pk = pk_of(node.table)
        by_name = {a.name: a.id for a in node.attrs}
        if pk and all(p in by_name for p in pk):
            return [frozenset(by_name[p] for p in pk)]
        return []

    def explain(self, node: Scan) -> str:
        cols = ", ".join(a.name for a in node.attrs)
        return f"Scan {node.table} ({cols}): its change between two barriers"
