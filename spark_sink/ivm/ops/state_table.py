"""What an operator declares of the state tables it keeps: their name, layout and key.

A state table is a store table of kind ``state``, named after its view (``V__sv_<what>``), that
the view's job writes in the same epoch transaction as the view (versioned, exactly-once and
consistent with the view at every barrier). The operator that reads a table in its delta rule
declares it (``Operator.state_tables``); ``spark_sink.ivm.state.ensure`` creates it in the store
and ``spark_sink.ivm.state_builds`` fills it on Spark at a build, by its ``role``:

- ``groups`` (``ops.aggregate``): per group, the running row count and per function its running
  sum (or extreme) and non-NULL count;
- ``values`` (``ops.aggregate``): per group and value of a MIN/MAX or DISTINCT function, the
  value's multiplicity, in the value's order;
- ``matches`` (``ops.outer_join``): per join key of an outer join's outer side, the count of the
  other side's rows;
- ``exists`` (``ops.semi_join``): per join key of a semi or anti join without a residual
  condition, the count of its right side's rows;
- ``index`` (``ops.scan``): a source's rows by a non-key column C (the index (C, key) of T), for
  lookups by C;
- ``topk`` (``ops.topk``): an ORDER BY ... LIMIT's input rows keyed by their order key, with
  their multiplicities (``spark_sink.ivm.topk_state``).

Nothing here imports pyspark or the store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from spark_sink.ivm.expressions import ddl_of

# kvstore.table_info.STATE_INFIX, which names the store's state tables (a unit test holds the two
# equal; the algebra does not import the store)
STATE_INFIX = "__sv_"
MAX_NAME = 128


def state_name(view: str, what: str) -> str:
    """``view`` + ``__sv_`` + ``what``, cut and suffixed with a digest of ``what`` where the
    whole would pass the store's 128-character limit for names."""
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
    role: str  # groups | index | values | matches | exists | topk
    source: str = ""  # index: the indexed table
    column: str = ""  # index: the indexed column; matches: the outer side (left | right)
    # groups, values: which aggregate of the plan; matches: which join; exists: which semi or
    # anti join (each in pre-order)
    index: int = 0
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
        if self.role == "exists":
            return (
                f"{self.name} (key {key}): per join key of semi or anti join {self.index}, the "
                "right rows that carry it"
            )
        if self.role == "values":
            return (
                f"{self.name} (key {key}): per group, each value of aggregate {self.call} "
                "with its multiplicity, in order"
            )
        if self.role == "topk":
            return (
                f"{self.name} (key {key}): every input row of ORDER BY ... LIMIT {self.index} "
                "with its multiplicity, in the query's order"
            )
        return f"{self.name} (key {key}): index of {self.source} by {self.column}"


def counts_table(
    view: str, what: str, role: str, key_dtypes: list[str], index: int, column: str = ""
) -> StateTable:
    """A table of per-key counts (roles ``matches`` and ``exists``), named ``state_name(view,
    what)``: columns k0, k1, ... of the join key's ``key_dtypes`` (Spark simpleStrings) and
    ``n BIGINT``, keyed by the k columns. Both roles share the layout because one build
    (``state_builds.outer_join.key_counts``) writes it and one reader (``spark_sink.ivm.outer``,
    ``MatchCounts``) steps it."""
    cols = [f"k{i} {ddl_of(t)}" for i, t in enumerate(key_dtypes)] + ["n BIGINT"]
    pk = tuple(f"k{i}" for i in range(len(key_dtypes)))
    return StateTable(state_name(view, what), ", ".join(cols), pk, role, column=column, index=index)
