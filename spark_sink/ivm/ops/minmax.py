"""MIN(x) and MAX(x) per group, kept under deletions.

MIN and MAX are not linear: deleting the current extreme needs the next one. So the state is the
group's multiset of values (``values.py``: (group, value) rows with their counts), a change is
folded into it vectorized, and the touched groups' extremes are read again from it.
``minmax_delta`` is ``values.group_delta`` with this read: per touched group, the old row
retracted and the new one emitted.

SQL semantics kept: NULL values are ignored (a group whose values are all NULL has MIN NULL; a
group whose multiset empties has no row; a global MIN over no rows is one row, NULL). Spark
orders NaN above every other value: MAX is NaN when the group holds a NaN, MIN is NaN only when
every non-NULL value is NaN (Arrow's min/max skip NaN, so MAX is patched with a per-group "any
NaN"). -0.0 and 0.0 are one value in the state, returned as 0.0. Strings and binaries order by
their bytes, as Spark's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.values import ValuesSpec, build_state, group_delta, present
from spark_sink.ivm.ops.zset import ArrowZSet, is_float

KINDS = ("min", "max")


@dataclass(frozen=True)
class MinMaxSpec(ValuesSpec):
    """``kind`` (``min`` or ``max``) of ``value`` per group of ``group_by``, as ``output``."""

    kind: str = "min"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kind not in KINDS:
            raise ValueError(f"MIN/MAX kind {self.kind!r} is not one of {KINDS}")


def read_minmax(spec: ValuesSpec, state: ArrowZSet) -> pa.Table:
    """Per group present in the consolidated ``state``, its group columns then ``spec.output``
    (the MIN or MAX of its present non-NULL values, NULL when none is)."""
    assert isinstance(spec, MinMaxSpec)
    t = present(state)
    g, v = list(spec.group_by), spec.value
    aggs: list = [(v, spec.kind)]
    floating = is_float(t.schema.field(v).type)
    if floating:
        t = t.append_column("__nan", pc.is_nan(t[v]))
        aggs.append(("__nan", "any"))
    out = t.group_by(g, use_threads=False).aggregate(aggs)
    col = out[f"{v}_{spec.kind}"]
    if floating and spec.kind == "max":
        nan = pa.scalar(float("nan"), col.type)
        col = pc.if_else(pc.fill_null(out["__nan_any"], False), nan, col)
    return pa.Table.from_arrays([*(out[c] for c in g), col], names=[*g, spec.output])


def minmax(spec: MinMaxSpec, z: ArrowZSet) -> pa.Table:
    """The aggregate over the whole input ``z`` (the state built from nothing, then read)."""
    return read_minmax(spec, build_state(spec, z))


def minmax_delta(spec: MinMaxSpec, state_old: ArrowZSet, change: ArrowZSet) -> ArrowZSet:
    """The output's change when the input changes by ``change`` (``values.group_delta``)."""
    return group_delta(spec, read_minmax, state_old, change)
