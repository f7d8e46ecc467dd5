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
from spark_sink.ivm.delta import Access
from spark_sink.ivm.expressions import agg_state_type
from spark_sink.ivm.plan import Aggregate

MAX_NAME = 128


def _ddl_of(dtype: str) -> str:
    """A Spark simpleString as our DDL type."""
    if dtype.startswith("decimal"):
        return dtype.upper()
    return {
        "bigint": "BIGINT",
        "int": "INT",
        "smallint": "INT",
        "tinyint": "INT",
        "double": "DOUBLE",
        "float": "DOUBLE",
        "string": "STRING",
        "boolean": "BOOLEAN",
        "date": "DATE",
        "timestamp": "TIMESTAMP",
        "timestamp_ntz": "TIMESTAMP",
        "binary": "BINARY",
    }[dtype]


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
    role: str  # groups | index
    source: str = ""  # index: the indexed table
    column: str = ""  # index: the indexed column
    index: int = 0  # groups: which aggregate of the plan (pre-order)

    def describe(self) -> str:
        if self.role == "groups":
            return f"{self.name} (key {', '.join(self.primary_key)}): per group, rows and sums"
        return f"{self.name} (key {', '.join(self.primary_key)}): index of {self.source} by {self.column}"


def groups_table(view: str, agg: Aggregate, index: int = 0) -> StateTable:
    """The group state of the ``index``-th aggregate of the plan (pre-order)."""
    if agg.groups:
        cols = [f"g{i} {_ddl_of(t)}" for i, t in enumerate(agg.group_dtypes)]
        pk = tuple(f"g{i}" for i in range(len(agg.groups)))
    else:
        cols, pk = ["g0 INT"], ("g0",)  # one group, key 0
    cols.append("nrows BIGINT")
    for j, a in enumerate(agg.aggs):
        cols += [f"s{j} {agg_state_type(a)}", f"n{j} BIGINT"]
    what = "groups" if index == 0 else f"groups_{index}"
    return StateTable(state_name(view, what), ", ".join(cols), pk, "groups", index=index)


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
