"""Scan: a source table, the leaf of every plan.

Delta rule: the table's change between the two barriers, read from its change index
(``Inputs.changes``: each changed key's old row retracted, its new row emitted). Lookup: the
table's rows at one barrier whose columns equal given values, read by key (``Access``: point
reads when the columns cover the primary key, a range read per value when they hold its leading
columns, else through the index state table the view job keeps on the first of them). Keeps no state of its own; its result is unique on its primary key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from spark_sink.ivm.ops.arrow_expr import col_name
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
from spark_sink.ivm.ops.state_table import StateTable, state_name
from spark_sink.ivm.ops.zset import ArrowZSet
from spark_sink.ivm.plan import Attr, Scan

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules


def pick(inputs: Inputs, table: str, attrs: tuple[Attr, ...], rows: list[tuple]) -> list[tuple]:
    """``rows`` (full rows of ``table`` in column order) cut to the columns ``attrs``."""
    cols = inputs.columns(table)
    return columns_of(rows, [cols.index(a.name) for a in attrs], len(cols))


def arrow_pick(table: pa.Table, attrs: tuple[Attr, ...], weights: pa.Array | None) -> ArrowZSet:
    """Full rows of a source (its visible columns by name) as a columnar Z-set over ``attrs``
    (columns named by id), each row weighted by ``weights`` (1 when None)."""
    cols = [table[a.name] for a in attrs]
    data = pa.Table.from_arrays(cols, names=[col_name(a.id) for a in attrs])
    return ArrowZSet.from_table(data, weights)


def index_table(
    view: str, access: Access, column_ddl: dict[str, str], primary_key: tuple[str, ...]
) -> StateTable:
    """The index state table a lookup of ``access.table`` by ``access.index_column`` reads:
    (k the column's value, p_<key column> for each column of the table's primary key), keyed by
    all of them (``column_ddl``: the table's column names and DDL types)."""
    col = access.index_column
    cols = [f"k {column_ddl[col]}"] + [f"p_{p} {column_ddl[p]}" for p in primary_key]
    name = state_name(view, f"ix_{access.table}_{col}")
    return StateTable(
        name,
        ", ".join(cols),
        ("k", *(f"p_{p}" for p in primary_key)),
        "index",
        access.table,
        col,
    )


def _access(rules: DeltaRules, node: Scan, ids: tuple[int, ...], values: set[tuple]) -> Access:
    """How a lookup of ``node`` by the columns ``ids`` reads its table (``values`` counted as
    the keys looked up)."""
    names = {a.id: a.name for a in node.attrs}
    cols = tuple(names[i] for i in ids)
    rules.lookups += len(values)
    return choose_access(node.table, cols, rules.inputs.primary_key(node.table))


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
        names = tuple(a.name for a in node.attrs)
        rows = rules.inputs.fetch(_access(rules, node, ids, values), side, values, names)
        out_ids = tuple(a.id for a in node.attrs)
        return ZSet(out_ids, rows, [1] * len(rows))

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

    def columnar_reason(self, node: Scan) -> str | None:
        return None  # a change read as Arrow holds every stored type

    def delta_arrow(self, rules: DeltaRules, node: Scan) -> ArrowZSet:
        data, weights = rules.inputs.changes_arrow(node.table)
        return arrow_pick(data, node.attrs, weights)

    def lookup_arrow(
        self, rules: DeltaRules, node: Scan, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        access = _access(rules, node, ids, values)
        return arrow_pick(rules.inputs.fetch_arrow(access, side, values), node.attrs, None)

    def explain(self, node: Scan) -> str:
        cols = ", ".join(a.name for a in node.attrs)
        return f"Scan {node.table} ({cols}): its change between two barriers"
