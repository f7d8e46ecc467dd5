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

The module's operator (``JoinOp``, at its end) has two forms of its rule: over Arrow
(``delta_arrow``/``lookup_arrow``, with the kernels above; inner joins only; the other side read by key into Arrow), which an epoch takes when
every node of the view's tree has one (``delta.columnar_reason``), and row-at-a-time over tuples
(``ops.operator.ZSet``), which takes every other tree and any epoch the Arrow form hands back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.delta import lookup_accesses
from spark_sink.ivm.ops.arrow_expr import COLUMNAR_DTYPES, NotColumnar, arrow_expr, col_name
from spark_sink.ivm.ops.filter import FilterSpec, apply_filter
from spark_sink.ivm.ops.keys import key_values
from spark_sink.ivm.ops.operator import NEW, OLD, Access, Operator, PkOf, Sets, ZSet, register, sees
from spark_sink.ivm.ops.state_table import StateTable
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet, WeightOverflow, concat, normalize_floats
from spark_sink.ivm.plan import Expr, Join, Node
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules

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


# ---------------------------------------------------------------------- the row rule

_FLOATS = ("double", "float")


def join_into(rules: DeltaRules, out: ZSet, node: Join, left: ZSet, right: ZSet) -> None:
    """Append to ``out`` the inner join of ``left`` and ``right`` on ``node``'s keys (a NULL key
    never matches) where its residual condition is TRUE, weights multiplied."""
    lp, rp = left.pos(), right.pos()
    li = [lp[c] for c in node.left_keys]
    ri = [rp[c] for c in node.right_keys]
    table: dict[tuple, list[int]] = {}
    for j, r in enumerate(right.rows):
        k = tuple(r[i] for i in ri)
        if None not in k:
            table.setdefault(k, []).append(j)
    res = None
    if node.residual is not None:
        res = rules.compiled(id(node), node.residual, out.pos())
    for lr, lw in zip(left.rows, left.weights, strict=True):
        k = tuple(lr[i] for i in li)
        for j in table.get(k, ()):
            row = lr + right.rows[j]
            if res is not None and res(row) is not True:
                continue
            out.rows.append(row)
            out.weights.append(lw * right.weights[j])


def inner_delta(rules: DeltaRules, node: Join) -> ZSet:
    """d(L join R) = dL join R_old + L_new join dR, each other side read by key."""
    dl, dr = rules.delta(node.left), rules.delta(node.right)
    out = ZSet(tuple(a.id for a in node.columns()))
    if len(dl):
        old_r = rules.lookup(node.right, node.right_keys, dl.values(node.left_keys), OLD)
        join_into(rules, out, node, dl, old_r)
    if len(dr):
        new_l = rules.lookup(node.left, node.left_keys, dr.values(node.right_keys), NEW)
        join_into(rules, out, node, new_l, dr)
    return out


def join_order(node: Join, ids: tuple[int, ...]) -> tuple[Node, Node, tuple, tuple, tuple]:
    """For a lookup into a join by ``ids``: which side is read first (the one holding ids), by
    which of them, and the keys that lead from it into the other side."""
    left_ids = {a.id for a in node.left.columns()}
    mine_l = tuple(c for c in ids if c in left_ids)
    if mine_l:
        return node.left, node.right, node.left_keys, node.right_keys, mine_l
    return node.right, node.left, node.right_keys, node.left_keys, ids


def _first_values(ids: tuple[int, ...], mine: tuple[int, ...], values: set[tuple]) -> set[tuple]:
    """``values`` (tuples over ``ids``) cut to the columns ``mine`` the first side is read by."""
    pos = {c: i for i, c in enumerate(ids)}
    return {tuple(v[pos[c]] for c in mine) for v in values}


@register
class JoinOp(Operator[Join]):
    """Inner and outer equi-joins: the inner delta, plus for an outer join the change of its
    NULL-padded rows (``spark_sink.ivm.ops.outer_join.dangling_delta``)."""

    node_type = Join

    def delta(self, rules: DeltaRules, node: Join) -> ZSet:
        # outer_join imports this module's kernels: imported here, not at the top
        from spark_sink.ivm.ops.outer_join import dangling_delta, outer_sides

        out = inner_delta(rules, node)
        for side in outer_sides(node):
            dangling_delta(rules, node, out, side)
        return out

    def lookup(
        self, rules: DeltaRules, node: Join, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        from spark_sink.ivm.ops.outer_join import outer_sides, pad_unmatched

        first, then, fk, tk, mine = join_order(node, ids)
        a = rules.lookup(first, mine, _first_values(ids, mine, values), side)
        b = rules.lookup(then, tk, a.values(fk), side)
        out = ZSet(tuple(x.id for x in node.columns()))
        if first is node.left:
            join_into(rules, out, node, a, b)
        else:
            join_into(rules, out, node, b, a)
        # Padded rows of the side looked up by (an outer side) are found here; padded rows of
        # the other side have NULL in ``ids`` and never equal a looked-up value.
        looked = "left" if first is node.left else "right"
        if looked in outer_sides(node):
            pad_unmatched(out, node, a, b, looked)
        return out

    def lookup_accesses(
        self, node: Join, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        first, then, _, tk, mine = join_order(node, ids)
        lookup_accesses(first, mine, pk_of, out)
        lookup_accesses(then, tk, pk_of, out)

    def plan_accesses(self, node: Join, pk_of: PkOf) -> list[Access]:
        return lookup_accesses(node.right, node.right_keys, pk_of) + lookup_accesses(
            node.left, node.left_keys, pk_of
        )

    def unique_sets(self, node: Join, pk_of: PkOf) -> Sets:
        ls, rs = unique_sets(node.left, pk_of), unique_sets(node.right, pk_of)
        # A left row meets at most one right row when the right side is unique on part of its
        # join keys. Not for floating point keys: the join equates 0.0 and -0.0 (and every
        # NaN), which a primary key holds as different values.
        exact = {a.id for a in node.columns() if a.dtype not in _FLOATS}
        left_once = any(s <= set(node.right_keys) & exact for s in rs)
        right_once = any(s <= set(node.left_keys) & exact for s in ls)
        if node.kind == "inner":
            out = [a | b for a in ls for b in rs]
            out += ls if left_once else []
            out += rs if right_once else []
            return out
        if node.kind == "left":
            return list(ls) if left_once else []
        if node.kind == "right":
            return list(rs) if right_once else []
        return []

    def expressions(self, node: Join) -> list[tuple[Expr, dict[int, int], dict | None]]:
        if node.residual is None:
            return []
        return [(node.residual, sees(node.columns()), None)]

    def columnar_reason(self, node: Join) -> str | None:
        why = key_types_reason("join", node.left, node.right, node.left_keys, node.right_keys)
        if why is not None:
            return why
        if node.residual is not None:
            try:
                arrow_expr(node.residual, {a.id: a for a in node.columns()})
            except NotColumnar as e:
                return f"a join condition on {e}"
        return None

    def delta_arrow(self, rules: DeltaRules, node: Join) -> ArrowZSet:
        dl, dr = rules.delta_arrow(node.left), rules.delta_arrow(node.right)
        lk = [col_name(c) for c in node.left_keys]
        rk = [col_name(c) for c in node.right_keys]
        old_r = rules.lookup_arrow(node.right, node.right_keys, key_values(dl.table, lk), OLD)
        new_l = rules.lookup_arrow(node.left, node.left_keys, key_values(dr.table, rk), NEW)
        inner = _residual(node, delta_inner_join(_spec(node), dl, old_r, new_l, dr))
        if node.kind == "inner":
            return inner
        from spark_sink.ivm.ops.outer_join import dangling_delta_arrow, outer_sides

        return concat([inner, *(dangling_delta_arrow(rules, node, s) for s in outer_sides(node))])

    def lookup_arrow(
        self, rules: DeltaRules, node: Join, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        first, then, fk, tk, mine = join_order(node, ids)
        a = rules.lookup_arrow(first, mine, _first_values(ids, mine, values), side)
        b = rules.lookup_arrow(then, tk, key_values(a.table, [col_name(c) for c in fk]), side)
        left, right = (a, b) if first is node.left else (b, a)
        out = _residual(node, inner_join(_spec(node), left, right))
        from spark_sink.ivm.ops.outer_join import outer_sides, padded_unmatched_arrow

        # as ``lookup``: the looked-up side's unmatched rows, padded, when it is an outer side
        looked = "left" if first is node.left else "right"
        if looked in outer_sides(node):
            out = concat([out, padded_unmatched_arrow(node, a, b, looked)])
        return out

    def state_tables(self, node: Join, view: str, index: int) -> list[StateTable]:
        """Per outer side, its match counts (``ops.outer_join.matches_table``)."""
        from spark_sink.ivm.ops.outer_join import matches_table, outer_sides, sides

        out = []
        for side in outer_sides(node):
            _, _, other, keys = sides(node, side)
            dtypes = {a.id: a.dtype for a in other.columns()}
            out.append(matches_table(view, index, side, [dtypes[k] for k in keys]))
        return out

    def explain(self, node: Join) -> str:
        kind = "" if node.kind == "inner" else f"{node.kind.upper()} OUTER "
        how = "dL join R_old + L_new join dR, the other side read by its join key"
        if node.kind != "inner":
            how += "; padded rows follow the touched keys' match counts"
        return f"{kind or 'inner '}Join: {how}"


def key_types_reason(
    what: str, left: Node, right: Node, left_keys: tuple[int, ...], right_keys: tuple[int, ...]
) -> str | None:
    """Why the Arrow kernels cannot match ``left``'s ``left_keys`` with ``right``'s
    ``right_keys`` (a pair of two types, or a type they do not take), naming the ``what``
    (a join, say); None when they can."""
    ltypes = {a.id: a.dtype for a in left.columns()}
    rtypes = {a.id: a.dtype for a in right.columns()}
    for lk, rk in zip(left_keys, right_keys, strict=True):
        if ltypes[lk] != rtypes[rk]:
            return f"a {what} of {ltypes[lk]} with {rtypes[rk]}"
        if ltypes[lk] not in COLUMNAR_DTYPES:
            return f"a {what} on a {ltypes[lk]} key"
    return None


def _spec(node: Join) -> JoinSpec:
    return JoinSpec(
        tuple(col_name(c) for c in node.left_keys), tuple(col_name(c) for c in node.right_keys)
    )


def _residual(node: Join, z: ArrowZSet) -> ArrowZSet:
    """``z`` where the join's residual condition is TRUE (all of it when there is none)."""
    if node.residual is None:
        return z
    pred = arrow_expr(node.residual, {a.id: a for a in node.columns()})
    return apply_filter(FilterSpec(pred), z)
