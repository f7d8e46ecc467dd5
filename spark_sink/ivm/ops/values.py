"""Per-group value multisets: the state that MIN/MAX (``minmax.py``) and COUNT(DISTINCT x)
(``distinct.py``) keep, because neither can be folded from a change alone (deleting the current
MIN needs the next one; deleting a value needs to know whether another copy remains).

The state is an ArrowZSet over (group columns..., value), consolidated: each group's distinct
values with their counts, NULL values included (they make the group exist, as a row whose value
is NULL does in SQL; the aggregates ignore them). A value is present while its count is positive,
a group while one of its rows is; a group whose multiset empties has no row (a global aggregate,
no group columns, always has its one row). Values compare with Spark's grouping equality
(``zset.consolidate``: every NaN one value, -0.0 stored as 0.0).

Delta rule, for any aggregate ``read`` over the state (``group_delta``): the groups the change
touches are narrowed out of the old state (``keys.restrict_to_keys``, grouping equality), the
change folded into them, and each touched group's old output row retracted and new one emitted
(rows that did not change cancel). The wiring will read just those groups' state rows (a keyed
read of the state table), which is why narrowing is a separate step and why ``group_delta``
accepts the whole state or any superset of the touched groups' rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.keys import distinct_keys, restrict_to_keys
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet


@dataclass(frozen=True)
class ValuesSpec:
    """The multiset of ``value`` per group of ``group_by`` (empty: one global group); the
    aggregate's output column is ``output``."""

    group_by: tuple[str, ...]
    value: str
    output: str

    def __post_init__(self) -> None:
        if self.output in self.group_by:
            raise ValueError(f"output column {self.output} is also a group column")


def value_change(spec: ValuesSpec, z: ArrowZSet) -> ArrowZSet:
    """The change of the state that ``z`` (a change of the aggregate's input) makes: its rows
    projected to (group columns, value), weights kept; linear, not consolidated."""
    return ArrowZSet(z.table.select([*spec.group_by, spec.value, WEIGHT]))


def build_state(spec: ValuesSpec, z: ArrowZSet) -> ArrowZSet:
    """The state of the whole input ``z`` (a build: every row a change from nothing)."""
    return value_change(spec, z).consolidate()


def fold_values(state: ArrowZSet, change: ArrowZSet) -> ArrowZSet:
    """``state`` plus a ``value_change``, consolidated (a count reaching 0 drops its row)."""
    return (state + change).consolidate()


def present(state: ArrowZSet) -> pa.Table:
    """The state's rows whose count is positive (the values and groups that exist), with
    ``__weight``; ``state`` must be consolidated."""
    return state.table.filter(pc.greater(state.weights, 0))


Read = Callable[[ValuesSpec, ArrowZSet], pa.Table]


def group_delta(spec: ValuesSpec, read: Read, state_old: ArrowZSet, change: ArrowZSet) -> ArrowZSet:
    """The change of ``read(spec, state)`` (one output row per group) when the aggregate's input
    changes by ``change``: per touched group, the old row retracted and the new one emitted;
    consolidated. ``state_old`` is consolidated, whole or any superset of the touched groups'
    rows; the caller folds the state itself (``fold_values(state_old, value_change(...))``)."""
    values = value_change(spec, change)
    groups = distinct_keys(values.table, spec.group_by, nulls_equal=True)
    old = restrict_to_keys(state_old, spec.group_by, groups, nulls_equal=True)
    new = fold_values(old, values)
    return (
        ArrowZSet.from_table(read(spec, new)) - ArrowZSet.from_table(read(spec, old))
    ).consolidate()
