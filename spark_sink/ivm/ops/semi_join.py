"""Semi and anti joins (``plan.SemiJoin``: EXISTS, IN, NOT EXISTS, NOT IN over NOT NULL
columns), correlated or not, with any residual condition.

Whether a left row is in the result depends only on the right rows of its own key. So between
two barriers the result changes only for the keys a change touches, and for those the rule
decides again, at both barriers, which left rows have a match:

- a key only the left side's change touches (the right rows of it did not change): the changed
  left rows are decided against the key's right rows (``dL`` restricted to matched rows, or to
  unmatched ones for an anti join);
- a key the right side's change touches (its match count may cross zero either way, and with a
  residual condition each left row has its own count): the key's left and right rows are read
  at the old and at the new barrier, both versions decided, and the new minus the old emitted.

Every read is keyed (the right side by its join keys, the left by its join keys), so an epoch
costs the rows of the touched keys, never a whole input; nothing is stored beyond the index
tables the keyed reads need. A left row whose key holds a NULL never matches: a semi join drops
it and an anti join keeps it (SQL's NOT EXISTS), with no read. NOT IN over a column that may be
NULL is refused at build (``catalyst._join_condition``): there one NULL on the right side changes
every left row's answer, which no per-key rule can follow.

Row-at-a-time only (``columnar_reason`` names it): a view with a semi join takes the row rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_sink.ivm.delta import lookup_accesses
from spark_sink.ivm.ops.operator import NEW, OLD, Access, Operator, PkOf, Sets, ZSet, register, sees
from spark_sink.ivm.plan import Expr, SemiJoin
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules


def _key(row: tuple, idx: list[int]) -> tuple:
    return tuple(row[i] for i in idx)


def decide(rules: DeltaRules, node: SemiJoin, left: ZSet, right: ZSet, out: ZSet) -> None:
    """Append to ``out`` the rows of ``left`` (with their weights) that are in ``node``'s
    result given the right rows ``right`` (which must hold every right row of the left rows'
    keys, at the barrier ``left`` was read at; a superset is harmless): those with a right row of
    equal keys that makes the residual TRUE, or for an anti join those without one."""
    lp, rp = left.pos(), right.pos()
    li = [lp[c] for c in node.left_keys]
    ri = [rp[c] for c in node.right_keys]
    by_key: dict[tuple, list[tuple]] = {}
    for r, w in zip(right.rows, right.weights, strict=True):
        k = _key(r, ri)
        if None not in k and w > 0:
            by_key.setdefault(k, []).append(r)
    res = None
    if node.residual is not None:
        pos = sees(node.left.columns() + node.right.columns())
        res = rules.compiled(id(node), node.residual, pos)
    for row, w in zip(left.rows, left.weights, strict=True):
        k = _key(row, li)
        matches = by_key.get(k, ()) if None not in k else ()
        if res is None:
            found = bool(matches)
        else:
            found = any(res(row + r) is True for r in matches)
        if found != node.anti:
            out.rows.append(row)
            out.weights.append(w)


def _restrict(z: ZSet, cols: tuple[int, ...], keys: set[tuple], inside: bool = True) -> ZSet:
    """The rows of ``z`` whose ``cols`` equal one of ``keys`` exactly (a keyed read may return
    a superset), or with ``inside`` False every other row."""
    p = z.pos()
    idx = [p[c] for c in cols]
    out = ZSet(z.ids)
    for r, w in zip(z.rows, z.weights, strict=True):
        if (_key(r, idx) in keys) == inside:
            out.rows.append(r)
            out.weights.append(w)
    return out


def _none(node: SemiJoin) -> ZSet:
    """No right rows (every left key NULL: nothing to read)."""
    return ZSet(tuple(a.id for a in node.right.columns()))


@register
class SemiJoinOp(Operator[SemiJoin]):
    """EXISTS / NOT EXISTS: the left rows of each touched key decided again at both barriers."""

    node_type = SemiJoin

    def delta(self, rules: DeltaRules, node: SemiJoin) -> ZSet:
        dl, dr = rules.delta(node.left), rules.delta(node.right)
        out = ZSet(tuple(a.id for a in node.columns()))
        moved = dr.values(node.right_keys)  # keys whose right rows changed (NULL ones never match)
        if len(dl):
            # left changes of keys whose right rows did not change: decided once, at the new
            # barrier (the same right rows as at the old one); rows with a NULL key included
            rest = _restrict(dl, node.left_keys, moved, inside=False)
            keys = rest.values(node.left_keys)
            right = rules.lookup(node.right, node.right_keys, keys, NEW) if keys else _none(node)
            decide(rules, node, rest, right, out)
        if moved:
            for side, sign in ((OLD, -1), (NEW, 1)):
                left = _restrict(
                    rules.lookup(node.left, node.left_keys, moved, side), node.left_keys, moved
                )
                right = rules.lookup(node.right, node.right_keys, moved, side)
                mark = len(out.rows)
                decide(rules, node, left, right, out)
                if sign < 0:
                    out.weights[mark:] = [-w for w in out.weights[mark:]]
        return out

    def lookup(
        self, rules: DeltaRules, node: SemiJoin, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        left = rules.lookup(node.left, ids, values, side)
        keys = left.values(node.left_keys)
        right = rules.lookup(node.right, node.right_keys, keys, side) if keys else _none(node)
        out = ZSet(tuple(a.id for a in node.columns()))
        decide(rules, node, left, right, out)
        return out

    def lookup_accesses(
        self, node: SemiJoin, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        lookup_accesses(node.left, ids, pk_of, out)
        lookup_accesses(node.right, node.right_keys, pk_of, out)

    def plan_accesses(self, node: SemiJoin, pk_of: PkOf) -> list[Access]:
        return lookup_accesses(node.right, node.right_keys, pk_of) + lookup_accesses(
            node.left, node.left_keys, pk_of
        )

    def unique_sets(self, node: SemiJoin, pk_of: PkOf) -> Sets:
        return unique_sets(node.left, pk_of)  # a subset of the left's rows

    def expressions(self, node: SemiJoin) -> list[tuple[Expr, dict[int, int], dict | None]]:
        if node.residual is None:
            return []
        return [(node.residual, sees(node.left.columns() + node.right.columns()), None)]

    def columnar_reason(self, node: SemiJoin) -> str | None:
        return f"a {'NOT EXISTS (anti join)' if node.anti else 'EXISTS (semi join)'}"

    def explain(self, node: SemiJoin) -> str:
        kind = "anti join (NOT EXISTS / NOT IN)" if node.anti else "semi join (EXISTS / IN)"
        return (
            f"{kind}: the left rows of each key the change touches decided again at the old "
            "and the new barrier, both sides read by key"
        )
