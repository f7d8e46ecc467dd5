"""DISTINCT: COUNT(DISTINCT x) per group, and SELECT DISTINCT; both kept under deletions.

COUNT(DISTINCT x) keeps the group's multiset of values (``values.py``): a value counts while its
count is positive, so deleting one copy of a value that has another changes nothing. Its delta
rule is ``values.group_delta`` with this read: per touched group, the old row retracted and the
new one emitted. NULL values are not counted (a group whose values are all NULL counts 0; a
group whose multiset empties has no row; a global COUNT(DISTINCT x) over no rows is one row, 0).
Values are distinct by Spark's grouping equality (every NaN one value, -0.0 equal to 0.0).

SELECT DISTINCT has set semantics: a row is in the output, once, exactly while its weight sum in
the input is positive. Its state is the input's multiplicities (the input Z-set itself,
consolidated). Delta rule (``distinct_delta``): the rows the change touches are narrowed out of
the old input (``keys.restrict_to_keys`` over all columns, grouping equality), and the output
changes by distinct(old + change) - distinct(old) over them: +1 for a row whose sum becomes
positive, -1 for one whose sum stops being positive. The wiring reads those rows by key.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.keys import distinct_keys, restrict_to_keys
from spark_sink.ivm.ops.values import ValuesSpec, build_state, group_delta, present
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet


def read_count_distinct(spec: ValuesSpec, state: ArrowZSet) -> pa.Table:
    """Per group present in the consolidated ``state``, its group columns then ``spec.output``
    (int64: how many non-NULL values it holds with a positive count)."""
    t = present(state)
    g = list(spec.group_by)
    # consolidated: one row per (group, value), so counting non-NULL rows counts values
    out = t.group_by(g, use_threads=False).aggregate([(spec.value, "count")])
    return pa.Table.from_arrays(
        [*(out[c] for c in g), out[f"{spec.value}_count"]], names=[*g, spec.output]
    )


def count_distinct(spec: ValuesSpec, z: ArrowZSet) -> pa.Table:
    """COUNT(DISTINCT value) per group over the whole input ``z``."""
    return read_count_distinct(spec, build_state(spec, z))


def count_distinct_delta(spec: ValuesSpec, state_old: ArrowZSet, change: ArrowZSet) -> ArrowZSet:
    """The output's change when the input changes by ``change`` (``values.group_delta``)."""
    return group_delta(spec, read_count_distinct, state_old, change)


def select_distinct(z: ArrowZSet) -> ArrowZSet:
    """Each row of ``z`` whose weight sum is positive, once (weight 1); consolidated."""
    c = z.consolidate()
    t = c.table.filter(pc.greater(c.weights, 0))
    ones = pa.array([1] * t.num_rows, pa.int64())
    return ArrowZSet(t.set_column(t.num_columns - 1, WEIGHT, ones))


def distinct_delta(input_old: ArrowZSet, change: ArrowZSet) -> ArrowZSet:
    """The change of ``select_distinct(input)`` when ``input_old`` (whole or any superset of the
    touched rows) changes by ``change``; consolidated."""
    cols = change.schema.names
    touched = distinct_keys(change.table, cols, nulls_equal=True)
    old = restrict_to_keys(input_old, cols, touched, nulls_equal=True)
    return (select_distinct(old + change) - select_distinct(old)).consolidate()
