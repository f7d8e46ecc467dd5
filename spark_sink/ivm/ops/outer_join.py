"""LEFT, RIGHT and FULL outer equi-join of two Z-sets, and its delta rule.

The outer join is the inner join (``join.py``) plus the dangling rows of each outer side: a row
of the left side (for LEFT and FULL) whose key has no match on the right appears once more,
padded with NULLs for the right's columns, with its own weight; the right side likewise for
RIGHT and FULL. A key *has a match* when the other side's rows carrying it have a positive total
weight (for a table, a bag, that is: when one such row exists). A key with a NULL in any column
matches nothing, so its rows always dangle; floating point keys compare normalized (NaN matches
NaN, -0.0 matches 0.0), as in the inner join and Spark.

Delta rule, as today's engine states it (``spark_sink.ivm.delta``): the inner join's delta, plus
the change of the dangling rows. For every non-NULL join key the change touches (on either
side), each outer side's rows of that key that dangled at the old state are retracted and those
that dangle at the new state emitted; whether a key has a match is read at both states, not
counted, so a row that loses its only match and regains it within one step is exact. Rows of the
change whose key holds a NULL dangle before and after, whatever the other side holds: their
change is the change's own rows, padded. No other key's dangling rows can change.

``delta_outer_join`` takes the old inputs whole, as the property tests give them, and narrows
them to the touched keys with ``keys.restrict_to_keys`` before anything else reads them. The
wiring will read only those keys' rows (keyed lookups of each side at both barriers), which is
why the narrowing is its own step: the rule's cost follows the change, not the inputs.

The Join operator (``ops.join.JoinOp``) keeps an outer join's padded rows by the rules at the
end: ``dangling_delta`` and ``pad_unmatched`` over tuples (the row path), and
``dangling_delta_arrow`` and ``padded_unmatched_arrow`` over Arrow, when the view's tree runs
over Arrow. Both read the touched keys' match counts (``spark_sink.ivm.outer``), never the other
side's rows, to decide whether a key has a match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.join import JoinSpec, delta_inner_join, inner_join
from spark_sink.ivm.ops.operator import NEW, OLD, ZSet
from spark_sink.ivm.ops.state_table import StateTable, counts_table
from spark_sink.ivm.plan import Join, Node

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules
from spark_sink.ivm.ops.arrow_expr import col_name
from spark_sink.ivm.ops.keys import (
    any_null,
    distinct_keys,
    key_values,
    net_change_by_key,
    restrict_to_keys,
    rows_of_keys,
)
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet, concat, normalized_keys

KINDS = ("left", "right", "full")


@dataclass(frozen=True)
class OuterJoinSpec:
    """``kind`` (``left``, ``right`` or ``full``) outer join on ``left_keys[i] = right_keys[i]``;
    columns as in ``JoinSpec`` (the left's then the right's, names distinct)."""

    kind: str
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"outer join kind {self.kind!r} is not one of {KINDS}")

    @property
    def inner(self) -> JoinSpec:
        return JoinSpec(self.left_keys, self.right_keys)

    @property
    def keeps_left(self) -> bool:
        return self.kind in ("left", "full")

    @property
    def keeps_right(self) -> bool:
        return self.kind in ("right", "full")


def outer_join(spec: OuterJoinSpec, left: ArrowZSet, right: ArrowZSet) -> ArrowZSet:
    """``left`` ``spec.kind`` outer joined with ``right``: the inner join's rows (weights
    multiplied) and each outer side's dangling rows padded with NULLs (weights kept); not
    consolidated. ``ValueError`` as ``inner_join``'s."""
    parts = [inner_join(spec.inner, left, right)]
    if spec.keeps_left:
        parts.append(_dangling(left, spec.left_keys, right, spec.right_keys, right.schema, True))
    if spec.keeps_right:
        parts.append(_dangling(right, spec.right_keys, left, spec.left_keys, left.schema, False))
    return concat(parts)


def delta_outer_join(
    spec: OuterJoinSpec,
    left_old: ArrowZSet,
    right_old: ArrowZSet,
    d_left: ArrowZSet,
    d_right: ArrowZSet,
) -> ArrowZSet:
    """The change of ``outer_join(spec, left, right)`` when ``left_old`` becomes
    ``left_old + d_left`` and ``right_old`` becomes ``right_old + d_right``; not consolidated.
    ``left_old`` and ``right_old`` may be whole or any superset of the touched keys' rows:
    they are narrowed to the non-NULL join keys of ``d_left`` and ``d_right`` first."""
    lk, rk = spec.left_keys, spec.right_keys
    touched = pa.concat_tables(
        [
            distinct_keys(d_left.table, lk, nulls_equal=False).rename_columns(list(lk)),
            distinct_keys(d_right.table, rk, nulls_equal=False).rename_columns(list(lk)),
        ]
    )
    lo = restrict_to_keys(left_old, lk, touched, nulls_equal=False)
    ro = restrict_to_keys(right_old, rk, touched, nulls_equal=False)
    # the change's NULL-keyed rows stay out of the new states (``_dangling_change`` adds them)
    ln, rn = lo + _keyed(d_left, lk), ro + _keyed(d_right, rk)
    parts = [delta_inner_join(spec.inner, d_left, ro, ln, d_right)]
    if spec.keeps_left:
        parts += _dangling_change(lo, ln, d_left, lk, ro, rn, rk, right_old.schema, True)
    if spec.keeps_right:
        parts += _dangling_change(ro, rn, d_right, rk, lo, ln, lk, left_old.schema, False)
    return concat(parts)


def _dangling_change(
    kept_old: ArrowZSet,
    kept_new: ArrowZSet,
    d_kept: ArrowZSet,
    kept_keys: tuple[str, ...],
    other_old: ArrowZSet,
    other_new: ArrowZSet,
    other_keys: tuple[str, ...],
    other_schema: pa.Schema,
    kept_is_left: bool,
) -> list[ArrowZSet]:
    # kept_old/new hold only non-NULL touched keys (narrowed), so the NULL-keyed rows of the
    # change are added on their own: they dangled before and dangle after
    def dangling(kept: ArrowZSet, other: ArrowZSet) -> ArrowZSet:
        return _dangling(kept, kept_keys, other, other_keys, other_schema, kept_is_left)

    nulls = ArrowZSet(d_kept.table.filter(any_null(d_kept.table, kept_keys)))
    return [
        dangling(kept_new, other_new),
        dangling(kept_old, other_old).negate(),
        _pad(nulls, other_schema, kept_is_left),
    ]


def _keyed(z: ArrowZSet, keys: tuple[str, ...]) -> ArrowZSet:
    return ArrowZSet(z.table.filter(pc.invert(any_null(z.table, keys))))


def _dangling(
    kept: ArrowZSet,
    kept_keys: tuple[str, ...],
    other: ArrowZSet,
    other_keys: tuple[str, ...],
    other_schema: pa.Schema,
    kept_is_left: bool,
) -> ArrowZSet:
    """The rows of ``kept`` whose key has no match in ``other``, padded."""
    ok = list(other_keys)
    o = _keyed(other, other_keys).table
    sums = normalized_keys(o.select([*ok, WEIGHT]), ok).group_by(ok, use_threads=False)
    sums = sums.aggregate([(WEIGHT, "sum")])
    matched = sums.filter(pc.greater(sums[f"{WEIGHT}_sum"], 0)).select(ok)
    names = [f"__ok{i}" for i in range(len(ok))]
    kk = list(kept_keys)
    t = kept.table
    for name, c in zip(names, kk, strict=True):
        t = t.append_column(name, normalized_keys(t.select([c]), [c])[c])
    # '=' in Acero's anti-join never matches NULL: a NULL-keyed row of ``kept`` stays
    t = t.join(matched.rename_columns(names), names, join_type="left anti", use_threads=False)
    return _pad(ArrowZSet(t.drop_columns(names)), other_schema, kept_is_left)


def _pad(kept: ArrowZSet, other_schema: pa.Schema, kept_is_left: bool) -> ArrowZSet:
    n = len(kept)
    pad = [pa.nulls(n, f.type) for f in other_schema]
    data = kept.data
    if kept_is_left:
        cols, names = [*data.columns, *pad], [*data.schema.names, *other_schema.names]
    else:
        cols, names = [*pad, *data.columns], [*other_schema.names, *data.schema.names]
    return ArrowZSet(pa.Table.from_arrays([*cols, kept.weights], names=[*names, WEIGHT]))


# ---------------------------------------------------------------------- the row rule
# (the Join operator, ``spark_sink.ivm.ops.join.JoinOp``, calls these for an outer join)


def outer_sides(node: Join) -> tuple[str, ...]:
    """The sides of ``node`` whose unmatched rows are kept, padded with NULLs."""
    return {"inner": (), "left": ("left",), "right": ("right",), "full": ("left", "right")}[
        node.kind
    ]


def sides(node: Join, side: str) -> tuple[Node, tuple[int, ...], Node, tuple[int, ...]]:
    """(``side``'s input, its join keys, the other input, its join keys)."""
    if side == "left":
        return node.left, node.left_keys, node.right, node.right_keys
    return node.right, node.right_keys, node.left, node.left_keys


def _padded(row: tuple, pad: tuple, side: str) -> tuple:
    return row + pad if side == "left" else pad + row


def dangling_delta(rules: DeltaRules, node: Join, out: ZSet, side: str) -> None:
    """Add to ``out`` the change of an outer join's NULL-padded rows of ``side``. The padded
    rows of key k are the kept side's rows of k while k's match count (spark_sink.ivm.outer)
    is 0: their change is the kept side's change where the count stays 0, minus the old rows
    where it leaves 0, plus the new rows where it reaches 0. A row with a NULL key never
    matches: it always dangles."""
    keep, keys_k, other, keys_o = sides(node, side)
    dk, do = rules.delta(keep), rules.delta(other)
    pad = (None,) * len(other.columns())
    keys = dk.values(keys_k) | do.values(keys_o)
    both: dict[tuple, tuple[int, int]] = {}
    if keys:
        rules.lookups += len(keys)
        both = rules.matches[(id(node), side)].step(keys, do.net_by_key(keys_o))
    pk = dk.pos()
    ki = [pk[c] for c in keys_k]
    for r, w in zip(dk.rows, dk.weights, strict=True):
        k = tuple(r[i] for i in ki)
        if None in k or both[k] == (0, 0):
            out.rows.append(_padded(r, pad, side))
            out.weights.append(w)
    gained = {k for k, (a, b) in both.items() if a == 0 and b > 0}
    lost = {k for k, (a, b) in both.items() if a > 0 and b == 0}
    for ks, ts, sign in ((gained, OLD, -1), (lost, NEW, 1)):
        if not ks:
            continue
        kept = rules.lookup(keep, keys_k, ks, ts)
        p = kept.pos()
        at = [p[c] for c in keys_k]
        for r in kept.rows:
            if tuple(r[i] for i in at) in ks:
                out.rows.append(_padded(r, pad, side))
                out.weights.append(sign)


def dangling_delta_arrow(rules: DeltaRules, node: Join, side: str) -> ArrowZSet:
    """``dangling_delta`` over Arrow: the change of ``side``'s NULL-padded rows, from the
    sides' changes as Arrow (``DeltaRules.delta_arrow``), the touched keys' match counts (the
    same ``MatchCounts`` step) and, where a count crosses 0, the kept side's rows of those keys
    read by key (``lookup_arrow``) at the old barrier (retracted) or the new one (emitted)."""
    keep, keys_k, other, keys_o = sides(node, side)
    dk, do = rules.delta_arrow(keep), rules.delta_arrow(other)
    kk, ko = tuple(col_name(c) for c in keys_k), tuple(col_name(c) for c in keys_o)
    other_schema = do.data.schema  # the other side's columns, padded with NULLs
    left = side == "left"
    # a row of the change whose key holds a NULL dangles before and after: its change, padded
    pieces = [_pad(ArrowZSet(dk.table.filter(any_null(dk.table, kk))), other_schema, left)]
    keys = key_values(dk.table, kk) | key_values(do.table, ko)
    if not keys:
        return concat(pieces)
    rules.lookups += len(keys)
    counts = rules.matches[(id(node), side)].step(keys, net_change_by_key(do, ko))
    still = [k for k, (a, b) in counts.items() if a == 0 and b == 0]
    if still:  # unmatched before and after: the kept side's change is the padded rows' change
        pieces.append(_pad(rows_of_keys(dk, kk, still), other_schema, left))
    gained = {k for k, (a, b) in counts.items() if a == 0 and b > 0}
    lost = {k for k, (a, b) in counts.items() if a > 0 and b == 0}
    for ks, ts, sign in ((gained, OLD, -1), (lost, NEW, 1)):
        if ks:
            kept = rows_of_keys(rules.lookup_arrow(keep, keys_k, ks, ts), kk, ks)
            padded = _pad(kept, other_schema, left)
            pieces.append(padded if sign > 0 else padded.negate())
    return concat(pieces)


def padded_unmatched_arrow(node: Join, kept: ArrowZSet, other: ArrowZSet, side: str) -> ArrowZSet:
    """``pad_unmatched`` over Arrow: the rows of ``kept`` (the ``side`` input's rows read by a
    lookup) that no row of ``other`` (the other input's rows of their keys) matches, padded."""
    _, keys_k, _, keys_o = sides(node, side)
    kk, ko = tuple(col_name(c) for c in keys_k), tuple(col_name(c) for c in keys_o)
    return _dangling(kept, kk, other, ko, other.data.schema, side == "left")


def pad_unmatched(out: ZSet, node: Join, kept: ZSet, other: ZSet, side: str) -> None:
    """Append to ``out`` the rows of ``kept`` (the ``side`` input's rows read by a lookup) that
    no row of ``other`` matches, padded with NULLs, each with weight 1."""
    _, keys_k, other_node, keys_o = sides(node, side)
    matched = other.values(keys_o)
    p = kept.pos()
    ki = [p[c] for c in keys_k]
    pad = (None,) * len(other_node.columns())
    for r in kept.rows:
        if tuple(r[i] for i in ki) not in matched:
            out.rows.append(_padded(r, pad, side))
            out.weights.append(1)


def matches_table(view: str, index: int, side: str, key_dtypes: list[str]) -> StateTable:
    """The match counts of the ``side`` outer side of the plan's ``index``-th join (pre-order):
    per join key (k0, ...), ``n`` rows of the other side (spark_sink.ivm.outer)."""
    return counts_table(view, f"matches_{index}_{side}", "matches", key_dtypes, index, side)
