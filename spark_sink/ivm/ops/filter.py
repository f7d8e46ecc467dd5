"""Filter (SQL WHERE, HAVING): keep the rows whose predicate is TRUE.

Delta rule: filter is linear, d(filter(R)) = filter(dR); the changed rows are filtered and keep
their weights, and no state is read or kept.

SQL semantics kept: a row is kept only where the predicate is TRUE; FALSE and NULL drop it
(three-valued logic, as WHERE). The predicate's own arithmetic is the caller's kernel choice:
Spark ANSI raises on BIGINT overflow, so a predicate computing sums uses pyarrow's ``*_checked``
kernels, which raise ``pyarrow.ArrowInvalid`` instead of wrapping. Arrow's float comparisons
are IEEE's (NaN compares false with everything) while Spark orders NaN above every other value
and NaN = NaN is true: a converter maps Spark's comparisons of DOUBLE/FLOAT to a callable (or an
expression that handles NaN), never to Arrow's kernels as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.zset import ArrowZSet

# a pyarrow compute Expression, or a callable over the data table
Predicate: TypeAlias = "pc.Expression | Callable[[pa.Table], pa.Array | pa.ChunkedArray]"


@dataclass(frozen=True)
class FilterSpec:
    """``predicate``: a pyarrow compute Expression over the data columns, or a callable from the
    data table to a boolean array of its length (for what Arrow's kernels do not evaluate the
    way Spark does)."""

    predicate: Predicate


def apply_filter(spec: FilterSpec, z: ArrowZSet) -> ArrowZSet:
    """The rows of ``z`` whose predicate is TRUE, weights kept; not consolidated."""
    if isinstance(spec.predicate, pc.Expression):
        return ArrowZSet(z.table.filter(spec.predicate))
    mask = spec.predicate(z.data)
    if len(mask) != len(z) or not pa.types.is_boolean(mask.type):
        raise ValueError(
            f"a filter predicate returned {mask.type} of length {len(mask)} for {len(z)} rows"
        )
    return ArrowZSet(z.table.filter(mask, null_selection_behavior="drop"))
