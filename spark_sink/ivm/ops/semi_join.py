"""Semi and anti joins (``plan.SemiJoin``: EXISTS, IN, NOT EXISTS, NOT IN over NOT NULL
columns), correlated or not, with any residual condition.

Whether a left row is in the result depends only on the right rows of its own key. So between
two barriers the result changes only for the keys a change touches.

Without a residual condition a key's answer is one number: how many right rows carry it. The
operator then keeps those counts in a state table (role ``exists``, ``semi_table``; the outer
joins' ``MatchCounts`` over it) and never reads the right side's rows:

- per key either change touches, the count at the old barrier is read by key and the new one is
  the old plus the right change's net weight for it;
- the changed left rows of a key whose answer is the same at both barriers pass through when
  that answer is "in the result" (semi: count > 0, anti: count = 0);
- a key whose answer flips has its left rows read by key at the barrier where they are in the
  result: emitted (read at the new barrier) or retracted (read at the old one).

So an epoch reads one count per touched key and the left rows of the keys whose answer flips:
for NOT EXISTS over orders (TPC-H q22) a new or deleted order flips its customer only when it is
the customer's first or last. A lookup into the join (an operator above it reads its rows by
key) reads the left rows and decides them by the counts at that barrier. These rules also run
over Arrow (``delta_arrow``), so a view with such a join keeps the columnar path.

A residual that is exactly one right column unequal to one left column of the same type (TPC-H
q21's ``l2.l_suppkey <> l1.l_suppkey``, ``inequality``) is counted too. A left row with key k and
value d has as many matches as the right rows of key k whose column is neither NULL nor d:
N(k) - N(k, d). So the operator keeps two count tables, N(k) over the right rows whose column is
not NULL and N(k, d) per key and value (role ``exists``, column ``pairs``), and again never reads
the right side's rows:

- a key whose right rows did not change keeps every left row's answer: the left side's changed
  rows of it are decided once, by the counts;
- a key whose right rows changed has its left rows read at the new barrier only (those at the
  old barrier are the new ones minus the left side's change), each decided by the counts at
  both barriers, and the rows whose answer flips are emitted or retracted.

These rules run row at a time (``columnar_reason`` says so). A NULL on either side of ``<>``
is never TRUE, so a left row with a NULL value matches nothing, as in SQL.

Any other residual condition (``a.v >= b.r``, say) gives each left row a count no per-key state
holds, and the rule decides rows again (``decide``), row at a time:

- a key only the left side's change touches (the right rows of it did not change): the changed
  left rows are decided against the key's right rows, read at the new barrier;
- a key the right side's change touches: the key's left and right rows are read at the old and
  at the new barrier, both versions decided, and the new minus the old emitted.

Every read is keyed (the right side by its join keys, the left by its join keys), so an epoch
costs the rows of the touched keys, never a whole input. A left row whose key holds a NULL
never matches: a semi join drops it and an anti join keeps it (SQL's NOT EXISTS), with no read.
NOT IN over a column that may be NULL is refused at build (``catalyst._join_condition``): there
one NULL on the right side changes every left row's answer, which no per-key rule can follow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_sink.ivm.delta import lookup_accesses
from spark_sink.ivm.ops.arrow_expr import col_name
from spark_sink.ivm.ops.join import key_types_reason
from spark_sink.ivm.ops.keys import any_null, key_values, net_change_by_key, rows_of_keys
from spark_sink.ivm.ops.operator import NEW, OLD, Access, Operator, PkOf, Sets, ZSet, register, sees
from spark_sink.ivm.ops.state_table import StateTable, counts_table
from spark_sink.ivm.ops.zset import ArrowZSet, concat
from spark_sink.ivm.plan import Call, Col, Expr, SemiJoin
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules, MatchCounts

# The names a semi join's counts go by in ``DeltaRules.matches`` (beside an outer join's sides):
# per key, and (with an inequality residual) per key and value, the StateTable's column.
EXISTS = "exists"
PAIRS = "pairs"

# Types whose Python equality is Spark's: a float's NaN and -0.0 are not (Spark's = holds for
# NaN = NaN and 0.0 = -0.0), so a float inequality keeps the rule that decides rows.
_UNCOUNTED_DTYPES = ("float", "double")


def _key(row: tuple, idx: list[int]) -> tuple:
    return tuple(row[i] for i in idx)


def inequality(node: SemiJoin) -> tuple[int, int] | None:
    """(right column id, left column id) when ``node``'s residual condition is exactly those two
    columns compared by ``<>`` (``NOT (a = b)``), of one type that is not a float; else None."""
    r = node.residual
    if not (isinstance(r, Call) and r.op == "not" and len(r.args) == 1):
        return None
    eq = r.args[0]
    if not (isinstance(eq, Call) and eq.op == "eq" and len(eq.args) == 2):
        return None
    if not all(isinstance(a, Col) for a in eq.args):
        return None
    left = {a.id: a.dtype for a in node.left.columns()}
    right = {a.id: a.dtype for a in node.right.columns()}
    a, b = eq.args[0].id, eq.args[1].id
    pair = (a, b) if a in right and b in left else (b, a) if b in right and a in left else None
    if pair is None or right[pair[0]] != left[pair[1]] or right[pair[0]] in _UNCOUNTED_DTYPES:
        return None
    return pair


def counted(node: SemiJoin) -> bool:
    """Whether ``node`` keeps counts of its right rows instead of reading them: per key where it
    has no residual condition, per key and per (key, value) where the residual is an
    ``inequality``."""
    return node.residual is None or inequality(node) is not None


def pairs_table(view: str, index: int, dtypes: list[str]) -> StateTable:
    """The per-(key, value) counts of the plan's ``index``-th semi or anti join whose residual is
    an ``inequality``: per join key and value of its right column (k0, ..., kn), ``n`` right
    rows carrying them."""
    return counts_table(view, f"exists_{index}_pairs", EXISTS, dtypes, index, PAIRS)


def semi_table(view: str, index: int, key_dtypes: list[str]) -> StateTable:
    """The counts of the plan's ``index``-th semi or anti join (pre-order): per join key
    (k0, ...), ``n`` right rows carrying it (with an ``inequality`` residual, only those whose
    compared column is not NULL)."""
    return counts_table(view, f"exists_{index}", EXISTS, key_dtypes, index)


def _counts(rules: DeltaRules, node: SemiJoin) -> MatchCounts:
    got = rules.matches.get((id(node), EXISTS))
    if got is None:  # the plan declared the table (state_tables): the epoch must bring it
        raise RuntimeError("a semi join without a residual condition was given no counts")
    return got


def _in_result(node: SemiJoin, n: int) -> bool:
    """Whether a left row whose key has ``n`` right rows is in the result."""
    return (n > 0) != node.anti


def _right_change(rules: DeltaRules, node: SemiJoin) -> dict[tuple, int]:
    """The right side's net change per non-NULL key."""
    return rules.delta(node.right).net_by_key(node.right_keys)


def _right_change_arrow(rules: DeltaRules, node: SemiJoin) -> dict[tuple, int]:
    """``_right_change`` from the right side's change over Arrow."""
    return net_change_by_key(rules.delta_arrow(node.right), [col_name(c) for c in node.right_keys])


def _step(
    rules: DeltaRules, node: SemiJoin, keys: set[tuple], change: dict[tuple, int]
) -> dict[tuple, tuple[int, int]]:
    """key -> (count at the old barrier, at the new one), one keyed read of the state each."""
    if not keys:
        return {}
    rules.lookups += len(keys)
    return _counts(rules, node).step(keys, change)


def _flipped(node: SemiJoin, both: dict[tuple, tuple[int, int]]) -> tuple[set, set]:
    """(keys whose left rows enter the result, keys whose left rows leave it)."""
    enter = {k for k, (a, b) in both.items() if not _in_result(node, a) and _in_result(node, b)}
    leave = {k for k, (a, b) in both.items() if _in_result(node, a) and not _in_result(node, b)}
    return enter, leave


def _counted_delta(rules: DeltaRules, node: SemiJoin) -> ZSet:
    dl = rules.delta(node.left)
    change = _right_change(rules, node)
    p = dl.pos()
    li = [p[c] for c in node.left_keys]
    keys = {k for k in (_key(r, li) for r in dl.rows) if None not in k} | set(change)
    both = _step(rules, node, keys, change)
    out = ZSet(tuple(a.id for a in node.columns()))
    for r, w in zip(dl.rows, dl.weights, strict=True):
        k = _key(r, li)
        if None in k:
            keep = node.anti  # never matches
        else:
            a, b = both[k]
            keep = _in_result(node, a) and _in_result(node, b)  # a flip is read below
        if keep:
            out.rows.append(r)
            out.weights.append(w)
    enter, leave = _flipped(node, both)
    for ks, side, sign in ((leave, OLD, -1), (enter, NEW, 1)):
        if ks:
            left = _restrict(rules.lookup(node.left, node.left_keys, ks, side), node.left_keys, ks)
            out.rows.extend(left.rows)
            out.weights.extend(sign * w for w in left.weights)
    return out


def _counted_lookup(
    rules: DeltaRules, node: SemiJoin, ids: tuple[int, ...], values: set[tuple], side: str
) -> ZSet:
    left = rules.lookup(node.left, ids, values, side)
    p = left.pos()
    li = [p[c] for c in node.left_keys]
    keys = {k for k in (_key(r, li) for r in left.rows) if None not in k}
    both = _step(rules, node, keys, _right_change(rules, node))
    at = 0 if side == OLD else 1
    out = ZSet(tuple(a.id for a in node.columns()))
    for r, w in zip(left.rows, left.weights, strict=True):
        k = _key(r, li)
        if node.anti if None in k else _in_result(node, both[k][at]):
            out.rows.append(r)
            out.weights.append(w)
    return out


def _pair_counts(rules: DeltaRules, node: SemiJoin) -> MatchCounts:
    got = rules.matches.get((id(node), PAIRS))
    if got is None:  # the plan declared the table (state_tables): the epoch must bring it
        raise RuntimeError("a semi join with an inequality residual was given no pair counts")
    return got


def _pair_changes(rules: DeltaRules, node: SemiJoin, rc: int) -> tuple[dict, dict]:
    """The right side's net change per key and per (key, value of ``rc``), over its rows whose
    key and value are not NULL (a row with a NULL value matches no left row under ``<>``)."""
    pairs = rules.delta(node.right).net_by_key((*node.right_keys, rc))
    per_key: dict[tuple, int] = {}
    for kc, w in pairs.items():
        per_key[kc[:-1]] = per_key.get(kc[:-1], 0) + w
    return per_key, pairs


class _PairDecider:
    """Decides left rows of a semi join with an ``inequality`` residual by the counts at either
    barrier: a row of key k and value d has N(k) - N(k, d) matches."""

    def __init__(self, rules: DeltaRules, node: SemiJoin, ids: tuple[int, ...]) -> None:
        self.node = node
        ne = inequality(node)
        if ne is None:  # SemiJoinOp takes this rule only for an inequality residual
            raise RuntimeError("a semi join without an inequality residual was given the pair rule")
        rc, lc = ne
        pos = {c: i for i, c in enumerate(ids)}
        self.li = [pos[c] for c in node.left_keys]
        self.di = pos[lc]
        self.per_key, self.pairs = _pair_changes(rules, node, rc)
        self.both_k: dict[tuple, tuple[int, int]] = {}
        self.both_kc: dict[tuple, tuple[int, int]] = {}

    def moved(self) -> set[tuple]:
        """The keys some of whose right rows' (key, value) counts changed."""
        return {kc[:-1] for kc, w in self.pairs.items() if w}

    def step(self, rules: DeltaRules, rows: list[tuple], every_change: bool) -> None:
        """Read the counts the ``rows``' keys and (key, value)s need, at both barriers; with
        ``every_change`` also every key and pair the right change touches (a delta must step
        them all, so that the counts written stay equal to the right side)."""
        keys: set[tuple] = set()
        pairs: set[tuple] = set()
        for r in rows:
            k = _key(r, self.li)
            if None not in k and r[self.di] is not None:
                keys.add(k)
                pairs.add((*k, r[self.di]))
        if every_change:
            keys |= set(self.per_key)
            pairs |= set(self.pairs)
        self.both_k.update(_step(rules, self.node, keys, self.per_key))
        if pairs:
            rules.lookups += len(pairs)
            self.both_kc.update(_pair_counts(rules, self.node).step(pairs, self.pairs))

    def in_result(self, row: tuple, at: int) -> bool:
        """Whether ``row`` (stepped) is in the result at the old (0) or new (1) barrier."""
        k = _key(row, self.li)
        d = row[self.di]
        n = 0 if None in k or d is None else self.both_k[k][at] - self.both_kc[(*k, d)][at]
        return _in_result(self.node, n)


def _pair_delta(rules: DeltaRules, node: SemiJoin) -> ZSet:
    dl = rules.delta(node.left)
    ids = tuple(a.id for a in node.columns())
    dec = _PairDecider(rules, node, dl.ids)
    moved = dec.moved()
    new = ZSet(dl.ids)
    if moved:  # the old rows of these keys are the new ones minus the left side's change
        new = _restrict(rules.lookup(node.left, node.left_keys, moved, NEW), node.left_keys, moved)
    dec.step(rules, dl.rows + new.rows, every_change=True)
    out = ZSet(ids)
    for r, w in zip(dl.rows, dl.weights, strict=True):
        # an unmoved key's counts are the same at both barriers; a moved key's changed row
        # stands for its old version here (new minus change), decided by the old counts
        if dec.in_result(r, 0 if _key(r, dec.li) in moved else 1):
            out.rows.append(r)
            out.weights.append(w)
    for r, w in zip(new.rows, new.weights, strict=True):
        was, now = dec.in_result(r, 0), dec.in_result(r, 1)
        if was != now:
            out.rows.append(r)
            out.weights.append(w if now else -w)
    return out


def _pair_lookup(
    rules: DeltaRules, node: SemiJoin, ids: tuple[int, ...], values: set[tuple], side: str
) -> ZSet:
    left = rules.lookup(node.left, ids, values, side)
    dec = _PairDecider(rules, node, left.ids)
    dec.step(rules, left.rows, every_change=False)
    at = 0 if side == OLD else 1
    out = ZSet(tuple(a.id for a in node.columns()))
    for r, w in zip(left.rows, left.weights, strict=True):
        if dec.in_result(r, at):
            out.rows.append(r)
            out.weights.append(w)
    return out


def _nulls(z: ArrowZSet, cols: list[str]) -> ArrowZSet:
    """The rows of ``z`` whose key holds a NULL."""
    return ArrowZSet(z.table.filter(any_null(z.table, cols)))


def _counted_delta_arrow(rules: DeltaRules, node: SemiJoin) -> ArrowZSet:
    dl = rules.delta_arrow(node.left)
    lk = [col_name(c) for c in node.left_keys]
    change = _right_change_arrow(rules, node)
    both = _step(rules, node, key_values(dl.table, lk) | set(change), change)
    # a NULL key never matches: such rows pass an anti join's change through, a semi join drops
    pieces = [_nulls(dl, lk) if node.anti else ArrowZSet(dl.table.slice(0, 0))]
    stay = [k for k, (a, b) in both.items() if _in_result(node, a) and _in_result(node, b)]
    if stay:
        pieces.append(rows_of_keys(dl, lk, stay))
    enter, leave = _flipped(node, both)
    for ks, side in ((leave, OLD), (enter, NEW)):
        if ks:
            rows = rows_of_keys(rules.lookup_arrow(node.left, node.left_keys, ks, side), lk, ks)
            pieces.append(rows.negate() if side == OLD else rows)
    return concat(pieces)


def _counted_lookup_arrow(
    rules: DeltaRules, node: SemiJoin, ids: tuple[int, ...], values: set[tuple], side: str
) -> ArrowZSet:
    left = rules.lookup_arrow(node.left, ids, values, side)
    lk = [col_name(c) for c in node.left_keys]
    both = _step(rules, node, key_values(left.table, lk), _right_change_arrow(rules, node))
    at = 0 if side == OLD else 1
    keep = [k for k, n in both.items() if _in_result(node, n[at])]
    pieces = [rows_of_keys(left, lk, keep)]
    if node.anti:
        pieces.append(_nulls(left, lk))
    return concat(pieces)


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
    """EXISTS / NOT EXISTS: per-key counts of the right rows where there is no residual
    condition, else the left rows of each touched key decided again at both barriers."""

    node_type = SemiJoin

    def delta(self, rules: DeltaRules, node: SemiJoin) -> ZSet:
        if counted(node):
            return (
                _counted_delta(rules, node) if node.residual is None else _pair_delta(rules, node)
            )
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
        if counted(node):
            rule = _counted_lookup if node.residual is None else _pair_lookup
            return rule(rules, node, ids, values, side)
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
        if not counted(node):  # the counts stand for the right rows
            lookup_accesses(node.right, node.right_keys, pk_of, out)

    def plan_accesses(self, node: SemiJoin, pk_of: PkOf) -> list[Access]:
        mine = lookup_accesses(node.left, node.left_keys, pk_of)
        if counted(node):
            return mine
        return lookup_accesses(node.right, node.right_keys, pk_of) + mine

    def unique_sets(self, node: SemiJoin, pk_of: PkOf) -> Sets:
        return unique_sets(node.left, pk_of)  # a subset of the left's rows

    def expressions(self, node: SemiJoin) -> list[tuple[Expr, dict[int, int], dict | None]]:
        if node.residual is None:
            return []
        return [(node.residual, sees(node.left.columns() + node.right.columns()), None)]

    def state_tables(self, node: SemiJoin, view: str, index: int) -> list[StateTable]:
        """Without a residual condition, the counts of its right rows per join key; with an
        ``inequality`` one, those of the right rows whose compared column is not NULL, and the
        counts per key and value of that column."""
        if not counted(node):
            return []
        dtypes = {a.id: a.dtype for a in node.right.columns()}
        keys = [dtypes[k] for k in node.right_keys]
        out = [semi_table(view, index, keys)]
        ne = inequality(node)
        if ne is not None:
            out.append(pairs_table(view, index, [*keys, dtypes[ne[0]]]))
        return out

    def columnar_reason(self, node: SemiJoin) -> str | None:
        kind = "NOT EXISTS (anti join)" if node.anti else "EXISTS (semi join)"
        if node.residual is not None:  # counted by value too (inequality) or not at all
            return f"a {kind} with a condition beyond its key equalities"
        return key_types_reason(kind, node.left, node.right, node.left_keys, node.right_keys)

    def delta_arrow(self, rules: DeltaRules, node: SemiJoin) -> ArrowZSet:
        return _counted_delta_arrow(rules, node)  # columnar_reason: only one without residual

    def lookup_arrow(
        self, rules: DeltaRules, node: SemiJoin, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        return _counted_lookup_arrow(rules, node, ids, values, side)

    def explain(self, node: SemiJoin) -> str:
        kind = "anti join (NOT EXISTS / NOT IN)" if node.anti else "semi join (EXISTS / IN)"
        if node.residual is None:
            return (
                f"{kind}: per key, the count of its right rows kept in a state table; the "
                "left rows of a key read only where its count crosses 0"
            )
        if counted(node):
            return (
                f"{kind}: per key and per (key, value) of the <> column, the count of its "
                "right rows kept in state tables; the left rows of a key whose right rows "
                "changed read at the new barrier and decided by the counts"
            )
        return (
            f"{kind}: the left rows of each key the change touches decided again at the old "
            "and the new barrier, both sides read by key"
        )
