"""Column sets a query's result is provably unique on, read off its plan (no data is read).

A view's first build checks that its primary key is unique in the query's result (an
aggregation over the whole result, and the result persisted so the query runs once). When the
plan proves the key unique, that check cannot fail and is skipped (``key_is_unique``). The proof
is conservative: a set is reported only by the operators' own rules (``Operator.unique_sets``
in ``spark_sink.ivm.ops``), so a query they do not cover is checked as before, never trusted:

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

from spark_sink.ivm.ops.operator import PkOf, Sets, operator_for
from spark_sink.ivm.plan import Node


def unique_sets(node: Node, pk_of: PkOf) -> Sets:
    """Sets of ``node``'s output column ids on which no two result rows agree (see the module's
    rules); an empty list when none is proven."""
    return operator_for(node).unique_sets(node, pk_of)


def key_is_unique(root: Node, key_ids: list[int], pk_of: PkOf) -> bool:
    """Whether the result of ``root`` is proven unique on the columns ``key_ids`` (a superset
    of a unique set is unique)."""
    keys = set(key_ids)
    return any(s <= keys for s in unique_sets(root, pk_of))
