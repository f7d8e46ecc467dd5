"""Inner equi-join of two Z-sets, and its bilinear delta rule.

Join of Z-sets: every pair (l, r) whose key columns are equal gives the row l ++ r with weight
w(l) * w(r). The join is bilinear, so between two barriers

    d(L join R) = dL join R_old + L_new join dR        (``delta_inner_join``)

(equivalently dL join R_old + L_old join dR + dL join dR: reading the new left side folds the
dL join dR term in). Only the rows of ``R_old`` and ``L_new`` whose keys occur in the other side's
change matter; the caller reads those by key, and a superset is harmless.

SQL semantics kept: a NULL key never matches (not even another NULL), as SQL's ``=``; floating
point keys are normalized as Spark's ``NormalizeFloatingNumbers`` does (NaN matches NaN, -0.0
matches 0.0), while the output carries each side's values as they were. Key columns of the two
sides must have equal types (Spark's analyzer casts them to one type first). Weights are
multiplied with a check: a product that leaves int64 raises ``WeightOverflow``, never wraps.

Implementation: one Arrow hash join (Acero, through ``pyarrow.Table.join``) over normalized copies
of the key columns; the result's row order is unspecified.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet, WeightOverflow, normalize_floats

_LW, _RW = "__weight_l", "__weight_r"


@dataclass(frozen=True)
class JoinSpec:
    """``left_keys[i] = right_keys[i]`` for every i. The output's columns are the left's data
    columns then the right's; their names must be distinct (the plan's columns are expression
    ids, so they are)."""

    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]


def inner_join(spec: JoinSpec, left: ArrowZSet, right: ArrowZSet) -> ArrowZSet:
    """``left`` joined with ``right`` on ``spec``'s keys, weights multiplied; not consolidated.
    ``ValueError`` for clashing column names or key types that differ."""
    if not spec.left_keys or len(spec.left_keys) != len(spec.right_keys):
        raise ValueError(f"join keys do not pair up: {spec.left_keys} vs {spec.right_keys}")
    ln, rn = left.schema.names, right.schema.names
    if set(ln) & set(rn):
        raise ValueError(f"joined sides share column names {sorted(set(ln) & set(rn))}")
    for a, b in zip(spec.left_keys, spec.right_keys, strict=True):
        ta, tb = left.schema.field(a).type, right.schema.field(b).type
        if ta != tb:
            raise ValueError(f"join key {a} is {ta} but {b} is {tb}: cast them to one type first")
    lk = [f"__jl{i}" for i in range(len(spec.left_keys))]
    rk = [f"__jr{i}" for i in range(len(spec.right_keys))]
    lt = left.table.rename_columns([*ln, _LW])
    rt = right.table.rename_columns([*rn, _RW])
    for name, col in zip(lk, spec.left_keys, strict=True):
        lt = lt.append_column(name, normalize_floats(lt[col]))
    for name, col in zip(rk, spec.right_keys, strict=True):
        rt = rt.append_column(name, normalize_floats(rt[col]))
    # Acero's hash join compares keys with '=' (NULL never equal), SQL's inner join
    j = lt.join(rt, lk, right_keys=rk, join_type="inner", coalesce_keys=False, use_threads=False)
    try:
        w = pc.multiply_checked(j[_LW], j[_RW])
    except pa.ArrowInvalid as e:
        raise WeightOverflow(f"join weight product leaves int64: {e}") from None
    return ArrowZSet(j.select([*ln, *rn]).append_column(WEIGHT, w))


def delta_inner_join(
    spec: JoinSpec, d_left: ArrowZSet, right_old: ArrowZSet, left_new: ArrowZSet, d_right: ArrowZSet
) -> ArrowZSet:
    """The change of ``left join right`` between two barriers: ``dL join R_old + L_new join dR``
    (``L_new = L_old + dL``), not consolidated. ``right_old`` and ``left_new`` may be just the
    rows whose keys occur in the other side's change, or any superset of them."""
    return inner_join(spec, d_left, right_old) + inner_join(spec, left_new, d_right)
