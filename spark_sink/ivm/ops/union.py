"""UNION ALL: the sum of its children's Z-sets.

Delta rule: union is linear, d(A union all B) = dA union all dB. No state.

SQL semantics kept: columns are matched by position (Spark's UNION ALL; its analyzer has already
cast each child's columns to the common type), and the output takes the first child's column
names. Duplicates are kept (weights add); UNION (distinct) is Spark's aggregate over UNION ALL,
not this operator. Nothing is computed on values, so NULLs and overflow do not arise.
"""

from __future__ import annotations

from collections.abc import Sequence

from spark_sink.ivm.ops.zset import ArrowZSet, concat


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
