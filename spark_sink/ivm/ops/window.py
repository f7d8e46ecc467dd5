"""The delta rule of a ranking window (``plan.Window``): ROW_NUMBER, RANK and DENSE_RANK over
``PARTITION BY p ORDER BY o``, the TopK of ``WHERE rn <= k`` being a Filter above it.

A change to the child can renumber every row of its partition and nothing outside it, so the
rule recomputes exactly the partitions the change touches:

1. touched = the distinct partition values of the child's delta (its pre- and post-images);
2. each touched partition is read whole at the OLD and at the NEW barrier by a keyed read of the
   child by the partition columns (``DeltaRules.lookup``: the source's primary key or an index
   state table ``V__sv_ix_T_C``); a superset may come back, so only rows whose partition value
   is exactly one of the touched ones are kept;
3. both versions are sorted with Spark's ordering (``compare_keys``) and numbered
   (``rank_rows``); the old rows are emitted with weight -1 and the new ones with +1.

The Filter above (``rn <= k``) keeps the top k of both versions and ``consolidate`` cancels the
rows that did not change, so the view receives only the rows that entered, left or moved. No
state is kept beyond the index tables of the keyed read: the ranking is recomputed from the
sources at both barriers, so it cannot drift from them. The cost of an epoch follows the size of
the touched partitions (read whole, not just their top k).

Decisions:

- **Ties under ROW_NUMBER**: Spark numbers equal rows in an arbitrary order; here they are
  ordered by the whole row, so the numbering is deterministic and a partition recomputed without
  a change to its equal rows numbers them as before. A view whose ORDER BY has ties is only
  reproducible when the key makes the tie irrelevant (the differential tests use a tie-breaker).
- **NULL partition values** form a partition in Spark, but an equality lookup (and an index
  state table, which holds no NULL) cannot find its rows. A change that touches a NULL partition
  raises ``NeedsBuild``: that epoch is a build on Spark (the view and state recomputed, exactly as
  at a first barrier), correct at every barrier; its metadata's ``why`` says so. A partition
  column declared NOT NULL never triggers it.
- DOUBLE/FLOAT partition columns and partitions by computed expressions are refused at build
  (``catalyst._window``).
- **A lookup into a window's result** (a join above a TopK, the window's side looked up by the
  join keys) reads the partitions of the looked-up values and ranks them (``window_lookup``):
  the lookup columns must include every PARTITION BY column, else the join is refused at build.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spark_sink.ivm.delta import lookup_accesses
from spark_sink.ivm.ops.operator import (
    NEW,
    OLD,
    Access,
    NeedsBuild,
    Operator,
    PkOf,
    Sets,
    ZSet,
    register,
    sees,
)
from spark_sink.ivm.plan import Expr, Unsupported, Window, output
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules

Spec = Sequence[tuple[bool, bool]]  # per ORDER BY expression: (ascending, nulls first)


# ---------------------------------------------------------------------- Spark's ordering


def compare_values(a: Any, b: Any) -> int:
    """Spark's order of two non-NULL values of one type: -1, 0 or 1. Numbers, DECIMAL, strings
    (UTF-8 bytes order = code point order), dates, timestamps, booleans (false < true) and binary
    compare naturally; a DOUBLE NaN is above every other value and equal to itself; -0.0 equals
    0.0."""
    if isinstance(a, float) and math.isnan(a):
        return 0 if isinstance(b, float) and math.isnan(b) else 1
    if isinstance(b, float) and math.isnan(b):
        return -1
    return (a > b) - (a < b)


def compare_keys(x: Sequence[Any], y: Sequence[Any], spec: Spec) -> int:
    """Compare two ORDER BY key tuples as Spark does: each expression ascending or descending,
    its NULLs first or last (the NULLs' place does not flip with DESC)."""
    for a, b, (asc, nulls_first) in zip(x, y, spec, strict=True):
        if a is None or b is None:
            if a is None and b is None:
                continue
            return (-1 if a is None else 1) * (1 if nulls_first else -1)
        c = compare_values(a, b)
        if c:
            return c if asc else -c
    return 0


def _total(row: tuple) -> tuple:
    """A sort key for whole rows (the tie-break under ROW_NUMBER): NULL first, then the value."""
    return tuple((0, 0) if v is None else (1, v) for v in row)


def _tiebreak(a: tuple, b: tuple) -> int:
    ka, kb = _total(a), _total(b)
    return (ka > kb) - (ka < kb)


def rank_rows(
    rows: Sequence[tuple], keys: Sequence[tuple], spec: Spec, kinds: Sequence[str]
) -> list[tuple[int, tuple]]:
    """One partition numbered: for each row in Spark's order, (its index in ``rows``, the value
    of each function of ``kinds``: row_number, rank (1 + the rows strictly before it) or
    dense_rank (1 + the distinct keys strictly before it)). ``keys[i]`` is row i's ORDER BY key;
    rows with equal keys are ordered by the whole row (ROW_NUMBER deterministic)."""

    def cmp(i: int, j: int) -> int:
        return compare_keys(keys[i], keys[j], spec) or _tiebreak(rows[i], rows[j])

    order = sorted(range(len(rows)), key=functools.cmp_to_key(cmp))
    out = []
    rank = dense = 0
    for n, i in enumerate(order):
        if n == 0 or compare_keys(keys[order[n - 1]], keys[i], spec):
            rank, dense = n + 1, dense + 1
        vals = {"row_number": n + 1, "rank": rank, "dense_rank": dense}
        out.append((i, tuple(vals[k] for k in kinds)))
    return out


# ---------------------------------------------------------------------- the delta rule


def window_delta(rules: DeltaRules, node: Window) -> ZSet:
    """The change of ``node``'s result: every touched partition's old rows (-1) and new rows
    (+1), numbered. Raises NeedsBuild when the change touches a NULL partition."""
    out = ZSet(tuple(a.id for a in output(node)))
    d = rules.delta(node.child)
    if not len(d):
        return out
    dp = d.pos()
    pi = [dp[c] for c in node.partition]
    touched: set[tuple] = set()
    for r in d.rows:
        t = tuple(r[i] for i in pi)
        if None in t:
            raise NeedsBuild(
                "a change in a NULL window partition (not found by a keyed read): rebuilt"
            )
        touched.add(t)
    for side, sign in ((OLD, -1), (NEW, 1)):
        for row in _ranked(rules, node, touched, side):
            out.rows.append(row)
            out.weights.append(sign)
    return out


def _ranked(rules: DeltaRules, node: Window, parts: set[tuple], side: str) -> list[tuple]:
    """The window's result rows of the partitions ``parts`` (non-NULL values of the partition
    columns) at ``side``: the child read by key, cut to exactly those partitions, numbered."""
    child_ids = tuple(a.id for a in output(node.child))
    pos = {c: i for i, c in enumerate(child_ids)}
    key_fns = [
        rules.compiled((id(node), "order", n), e, pos) for n, (e, _, _) in enumerate(node.order)
    ]
    spec = [(asc, nf) for _, asc, nf in node.order]
    kinds = [k for _, k in node.funcs]
    ppos = [pos[c] for c in node.partition]
    z = rules.lookup(node.child, node.partition, parts, side)
    if z.ids != child_ids:
        raise Unsupported(
            f"a window's input read with columns {z.ids}, not {child_ids}", code="WINDOW"
        )
    groups: dict[tuple, list[tuple]] = {}
    for r, w in zip(z.rows, z.weights, strict=True):
        p = tuple(r[i] for i in ppos)
        if p in parts:
            groups.setdefault(p, []).extend([r] * w)
    out = []
    for rows in groups.values():
        keys = [tuple(f(r) for f in key_fns) for r in rows]
        out += [rows[i] + vals for i, vals in rank_rows(rows, keys, spec, kinds)]
    return out


def lookup_partition_positions(node: Window, ids: tuple[int, ...]) -> list[int]:
    """For a lookup into the window by ``ids`` (a join above it): the position in ``ids`` of
    each partition column. The lookup columns must include every partition column (a partition
    is ranked whole), else Unsupported."""
    if not set(node.partition) <= set(ids):
        raise Unsupported(
            "a lookup into a window function's result by columns that do not include all its "
            "PARTITION BY columns (a join above a window on other columns) is not maintained "
            "incrementally",
            code="WINDOW",
        )
    return [ids.index(c) for c in node.partition]


def window_lookup(
    rules: DeltaRules, node: Window, ids: tuple[int, ...], values: set[tuple], side: str
) -> ZSet:
    """The window's rows at ``side`` whose ``ids`` may equal one of ``values`` (a superset: the
    partitions of those values, read by key and ranked), each with weight 1."""
    at = lookup_partition_positions(node, ids)
    parts = {tuple(v[i] for i in at) for v in values}
    parts = {p for p in parts if None not in p}  # an equality never matches NULL
    rows = _ranked(rules, node, parts, side) if parts else []
    return ZSet(tuple(a.id for a in output(node)), rows, [1] * len(rows))


def describe(node: Window) -> str:
    """The ``explain()`` line of a window node."""
    attrs = {a.id: a for a in output(node.child)}
    funcs = ", ".join(f"{k}()" for _, k in node.funcs)
    by = ", ".join(attrs[c].name for c in node.partition)
    line = (
        f"window {funcs} partitioned by ({by}): each partition the change touches is read whole "
        f"by ({by}) at both barriers and ranked again"
    )
    if any(attrs[c].nullable for c in node.partition):
        line += "; a change in a NULL partition makes the epoch a build"
    return line


@register
class WindowOp(Operator[Window]):
    """Every touched partition read whole at both barriers and ranked again (the module's
    rule); a lookup ranks the looked-up values' partitions."""

    node_type = Window

    def delta(self, rules: DeltaRules, node: Window) -> ZSet:
        return window_delta(rules, node)

    def lookup(
        self, rules: DeltaRules, node: Window, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        return window_lookup(rules, node, ids, values, side)

    def lookup_accesses(
        self, node: Window, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        lookup_partition_positions(node, ids)  # raises unless ids hold every partition column
        lookup_accesses(node.child, node.partition, pk_of, out)

    def plan_accesses(self, node: Window, pk_of: PkOf) -> list[Access]:
        return lookup_accesses(node.child, node.partition, pk_of)

    def unique_sets(self, node: Window, pk_of: PkOf) -> Sets:
        return unique_sets(node.child, pk_of)

    def expressions(self, node: Window) -> list[tuple[Expr, dict[int, int], dict | None]]:
        pos = sees(node.child.columns())
        return [(e, pos, None) for e, _, _ in node.order]

    def explain(self, node: Window) -> str:
        return describe(node)
