"""Column sets a query's result is provably unique on, read off its plan (no data is read).

A view's first build checks that its primary key is unique in the query's result (an
aggregation over the whole result, and the result persisted so the query runs once). When the
plan proves the key unique, that check cannot fail and is skipped (``key_is_unique``). The proof
is conservative: a set is reported only by the rules below, so a query they do not cover is
checked as before, never trusted.

- Scan: the table's primary key, when every key column is read.
- Filter, Window: the child's sets (rows are dropped or extended, never repeated).
- Project: a child's set whose every column is copied through unchanged.
- Aggregate: its grouping columns, when each is output as it is (GROUP BY makes one row per
  group; every NULL group is one group).
- Inner join: the union of a left and a right set; and a side's sets alone when the other side
  is joined on a set unique there (each row meets at most one partner; not through floating
  point keys, which the join compares normalized). LEFT (RIGHT) outer join:
  the outer side's sets when the inner side is joined on one of its unique sets (each outer row
  then appears exactly once, matched or padded). FULL outer joins and UNION ALL: none.

Nothing here imports pyspark.
"""

from __future__ import annotations

from collections.abc import Callable

from spark_sink.ivm.plan import (
    Aggregate,
    Col,
    Filter,
    GroupRef,
    Join,
    Node,
    Project,
    Scan,
    Union,
    Window,
    output,
)

_FLOATS = ("double", "float")

PkOf = Callable[[str], tuple[str, ...]]  # a table's primary key columns (() if it has none)
Sets = list[frozenset[int]]


def unique_sets(node: Node, pk_of: PkOf) -> Sets:
    """Sets of ``node``'s output column ids on which no two result rows agree (see the module's
    rules); an empty list when none is proven."""
    match node:
        case Scan(table=t, attrs=attrs):
            pk = pk_of(t)
            by_name = {a.name: a.id for a in attrs}
            if pk and all(p in by_name for p in pk):
                return [frozenset(by_name[p] for p in pk)]
            return []
        case Filter(child=c) | Window(child=c):
            return unique_sets(c, pk_of)
        case Project(outputs=outs, child=c):
            copied: dict[int, int] = {}  # child id -> an output id holding it unchanged
            for a, e in outs:
                if isinstance(e, Col):
                    copied.setdefault(e.id, a.id)
            return [
                frozenset(copied[i] for i in s)
                for s in unique_sets(c, pk_of)
                if all(i in copied for i in s)
            ]
        case Aggregate(groups=groups, outputs=outs):
            at = {e.index: a.id for a, e in outs if isinstance(e, GroupRef)}
            if all(i in at for i in range(len(groups))):
                return [frozenset(at[i] for i in range(len(groups)))]
            return []
        case Join(left=left, right=right, left_keys=lk, right_keys=rk, kind=kind):
            ls, rs = unique_sets(left, pk_of), unique_sets(right, pk_of)
            # A left row meets at most one right row when the right side is unique on part of
            # its join keys. Not for floating point keys: the join equates 0.0 and -0.0 (and
            # every NaN), which a primary key holds as different values.
            exact = {a.id for a in output(left) + output(right) if a.dtype not in _FLOATS}
            left_once = any(s <= set(rk) & exact for s in rs)
            right_once = any(s <= set(lk) & exact for s in ls)
            if kind == "inner":
                out = [a | b for a in ls for b in rs]
                out += ls if left_once else []
                out += rs if right_once else []
                return out
            if kind == "left":
                return list(ls) if left_once else []
            if kind == "right":
                return list(rs) if right_once else []
            return []
        case Union():
            return []
    return []


def key_is_unique(root: Node, key_ids: list[int], pk_of: PkOf) -> bool:
    """Whether the result of ``root`` is proven unique on the columns ``key_ids`` (a superset
    of a unique set is unique)."""
    keys = set(key_ids)
    return any(s <= keys for s in unique_sets(root, pk_of))
