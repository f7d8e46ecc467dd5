"""State tables of an incrementally maintained view: store tables of kind ``state`` that the
view's job writes in the same epoch transaction as the view, so they are versioned, exactly-once
and consistent with the view at every barrier.

- ``V__sv_groups`` (an aggregate view): per group (its key), the running row count and, per
  aggregate, the running sum and non-NULL count (spark_sink.ivm.aggregate).
- ``V__sv_ix_T_C`` (a join on a column C of T that does not cover T's primary key): the index
  (C, T's key) of T, so the rows of T with a given C are found by a prefix read.

They are named after the view (``kvstore.table_info.state_tables_of``), listed with kind ``state``
by ``snapview tables``, dropped with the view, and no job may register one as its target.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from coordinator.client import Client
from kvstore.schema import parse_ddl
from kvstore.table_info import STATE, STATE_INFIX, TableInfo
from spark_sink.ivm.expressions import agg_state_type, compensated, ddl_of, keeps_values
from spark_sink.ivm.ops.operator import Access
from spark_sink.ivm.plan import Aggregate

MAX_NAME = 128


def state_name(view: str, what: str) -> str:
    name = f"{view}{STATE_INFIX}{what}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(what.encode()).hexdigest()[:12]
    return f"{view}{STATE_INFIX}{what[: MAX_NAME - len(view) - len(STATE_INFIX) - 13]}_{digest}"


@dataclass(frozen=True)
class StateTable:
    name: str
    ddl: str
    primary_key: tuple[str, ...]
    role: str  # groups | index | values | matches
    source: str = ""  # index: the indexed table
    column: str = ""  # index: the indexed column; matches: the outer side (left | right)
    index: int = 0  # groups, values: which aggregate of the plan; matches: which join (pre-order)
    call: int = 0  # values: which aggregate function of that aggregate

    def describe(self) -> str:
        key = ", ".join(self.primary_key)
        if self.role == "groups":
            return f"{self.name} (key {key}): per group, rows and running sums or extremes"
        if self.role == "matches":
            return (
                f"{self.name} (key {key}): per join key of outer join {self.index}, the rows of "
                f"the side opposite its {self.column} side that match"
            )
        if self.role == "values":
            return (
                f"{self.name} (key {key}): per group, each value of aggregate {self.call} "
                "with its multiplicity, in order"
            )
        return f"{self.name} (key {key}): index of {self.source} by {self.column}"


def groups_table(view: str, agg: Aggregate, index: int = 0) -> StateTable:
    """The group state of the ``index``-th aggregate of the plan (pre-order)."""
    if agg.groups:
        cols = [f"g{i} {ddl_of(t)}" for i, t in enumerate(agg.group_dtypes)]
        pk = tuple(f"g{i}" for i in range(len(agg.groups)))
    else:
        cols, pk = ["g0 INT"], ("g0",)  # one group, key 0
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
        if agg.groups:
            cols = [f"g{i} {ddl_of(t)}" for i, t in enumerate(agg.group_dtypes)]
            pk = tuple(f"g{i}" for i in range(len(agg.groups)))
        else:
            cols, pk = ["g0 INT"], ("g0",)
        cols += ["o BINARY", f"v {ddl_of(a.input_dtype)}", "n BIGINT"]
        what = f"values_{index}_{j}"
        out.append(
            StateTable(
                state_name(view, what), ", ".join(cols), (*pk, "o"), "values", index=index, call=j
            )
        )
    return out


def index_table(view: str, access: Access, source: TableInfo) -> StateTable:
    ts = source.table_schema
    by_name = {c.name: c for c in ts.columns}
    col = by_name[access.index_column]
    pk = list(source.primary_key)
    cols = [f"k {col.type.ddl()}"] + [f"p_{p} {by_name[p].type.ddl()}" for p in pk]
    name = state_name(view, f"ix_{source.name}_{access.index_column}")
    return StateTable(
        name, ", ".join(cols), ("k", *(f"p_{p}" for p in pk)), "index", source.name, col.name
    )


def ensure(client: Client, tables: list[StateTable]) -> list[str]:
    """Create each state table, or re-create one whose schema differs; returns the names
    (re)created. Their contents are (re)built by the view's next full build."""
    existing = {t.name: t for t in client.tables()}
    made = []
    for st in tables:
        old = existing.get(st.name)
        if old is not None:
            cur = client.describe_table(st.name, refresh=True)
            have = [(c.name, c.type.ddl()) for c in cur.table_schema.visible_columns]
            want = [(c.name, c.type.ddl()) for c in parse_ddl(st.ddl, st.name)]
            same = cur.kind == STATE and tuple(cur.primary_key) == st.primary_key
            same = same and have == want
            if same:
                continue
            client.drop_table(st.name)
        client.create_table(st.name, st.ddl, list(st.primary_key), kind=STATE)
        made.append(st.name)
    return made


def matches_table(view: str, index: int, side: str, key_dtypes: list[str]) -> StateTable:
    """The match counts of the ``side`` outer side of the plan's ``index``-th join (pre-order):
    per join key (k0, ...), ``n`` rows of the other side (spark_sink.ivm.outer)."""
    cols = [f"k{i} {ddl_of(t)}" for i, t in enumerate(key_dtypes)] + ["n BIGINT"]
    pk = tuple(f"k{i}" for i in range(len(key_dtypes)))
    name = state_name(view, f"matches_{index}_{side}")
    return StateTable(name, ", ".join(cols), pk, "matches", column=side, index=index)
