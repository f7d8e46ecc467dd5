"""A plain-Python reference evaluator for the operators of ``spark_sink.ivm.ops``, used only by
their property tests (``tests/unit/ivm_ops/``).

Written independently of the Arrow code and as simply as possible (dicts and nested loops), so
that the two agreeing is evidence: a Z-set here is a dict ``{row tuple: weight}``; rows are
Python values; NULL is None. Equality follows Spark's grouping: None equals None in a Z-set or a
group key, never in a join key; every NaN is one value and -0.0 is 0.0 (``canon``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from spark_sink.ivm.ops.zset import NAN  # the one NaN object, so equal rows hash equal

Counter = dict[tuple, int]


def canon(v: Any) -> Any:
    if isinstance(v, float):
        if v != v:
            return NAN
        if v == 0.0:
            return 0.0
    return v


def zset(rows: Iterable[Sequence[Any]], weights: Iterable[int]) -> Counter:
    """The consolidated Z-set of ``rows`` with ``weights`` (zeros dropped)."""
    out: Counter = {}
    for r, w in zip(rows, weights, strict=True):
        key = tuple(canon(v) for v in r)
        out[key] = out.get(key, 0) + w
    return {k: w for k, w in out.items() if w != 0}


def add(*zs: Counter) -> Counter:
    rows, weights = [], []
    for z in zs:
        for r, w in z.items():
            rows.append(r)
            weights.append(w)
    return zset(rows, weights)


def neg(z: Counter) -> Counter:
    return {r: -w for r, w in z.items()}


def filter_(z: Counter, pred: Callable[[tuple], bool | None]) -> Counter:
    """Rows whose predicate is True (False and None drop the row)."""
    return zset([r for r in z if pred(r) is True], [w for r, w in z.items() if pred(r) is True])


def project(z: Counter, fn: Callable[[tuple], tuple]) -> Counter:
    return zset([fn(r) for r in z], list(z.values()))


def inner_join(
    left: Counter, right: Counter, lkeys: Sequence[int], rkeys: Sequence[int]
) -> Counter:
    """Every pair whose key values are all non-NULL and equal, weights multiplied."""
    rows, weights = [], []
    for lr, lw in left.items():
        for rr, rw in right.items():
            match = True
            for i, j in zip(lkeys, rkeys, strict=True):
                a, b = canon(lr[i]), canon(rr[j])
                if a is None or b is None:
                    match = False
                elif not (a == b or (a is NAN and b is NAN)):
                    match = False
            if match:
                rows.append(lr + rr)
                weights.append(lw * rw)
    return zset(rows, weights)


def union_all(*zs: Counter) -> Counter:
    return add(*zs)


def aggregate(z: Counter, group: Sequence[int], sums: Sequence[int]) -> Counter:
    """Per group: (count delta, then per sum column its sum delta and non-NULL count delta),
    as a dict ``{group key tuple + deltas tuple: 1}`` so it compares like a Z-set; groups whose
    deltas are all 0 are left out."""
    acc: dict[tuple, list[int]] = {}
    for r, w in z.items():
        g = tuple(canon(r[i]) for i in group)
        a = acc.setdefault(g, [0] * (1 + 2 * len(sums)))
        a[0] += w
        for k, i in enumerate(sums):
            if r[i] is not None:
                a[1 + 2 * k] += r[i] * w
                a[2 + 2 * k] += w
    return {g + tuple(a): 1 for g, a in acc.items() if any(a)}


def _join_key(row: tuple, idx: Sequence[int]) -> tuple | None:
    """The row's join key, or None when a column of it is NULL (it matches nothing)."""
    key = tuple(canon(row[i]) for i in idx)
    return None if any(v is None for v in key) else key


def outer_join(
    left: Counter,
    right: Counter,
    lkeys: Sequence[int],
    rkeys: Sequence[int],
    kind: str,
    widths: tuple[int, int],
) -> Counter:
    """The inner join plus, for LEFT/FULL, each left row whose key's total weight on the right
    is not positive (or holds a NULL) padded with ``widths[1]`` NULLs; RIGHT/FULL likewise."""
    out = [inner_join(left, right, lkeys, rkeys)]

    def dangling(
        kept: Counter, kidx: Sequence[int], other: Counter, oidx: Sequence[int]
    ) -> Counter:
        res: Counter = {}
        for row, w in kept.items():
            key = _join_key(row, kidx)
            total = sum(
                ow for orow, ow in other.items() if key is not None and _join_key(orow, oidx) == key
            )
            if total <= 0:
                res[row] = w
        return res

    if kind in ("left", "full"):
        d = dangling(left, lkeys, right, rkeys)
        out.append({r + (None,) * widths[1]: w for r, w in d.items()})
    if kind in ("right", "full"):
        d = dangling(right, rkeys, left, lkeys)
        out.append({(None,) * widths[0] + r: w for r, w in d.items()})
    return add(*out)


def _group_values(z: Counter, group: Sequence[int], value: int) -> dict[tuple, dict[Any, int]]:
    """Per group with a row of positive count, its values' counts (NULL included)."""
    counts: dict[tuple, dict[Any, int]] = {}
    for row, w in z.items():
        g = tuple(canon(row[i]) for i in group)
        vals = counts.setdefault(g, {})
        v = canon(row[value])
        vals[v] = vals.get(v, 0) + w
    out = {g: {v: n for v, n in vals.items() if n > 0} for g, vals in counts.items()}
    out = {g: vals for g, vals in out.items() if vals}
    if not group:
        out.setdefault((), {})  # a global aggregate has its one row
    return out


def _spark_order(v: Any) -> tuple:
    """Spark's ordering key: NaN above every other value."""
    return (1, 0) if v is NAN else (0, v)


def minmax(z: Counter, group: Sequence[int], value: int, kind: str) -> Counter:
    """Per group, ``(group..., MIN or MAX of its present non-NULL values or None)``, as
    ``{row: 1}``."""
    pick = min if kind == "min" else max
    out: Counter = {}
    for g, vals in _group_values(z, group, value).items():
        present = [v for v in vals if v is not None]
        out[g + (pick(present, key=_spark_order) if present else None,)] = 1
    return out


def count_distinct(z: Counter, group: Sequence[int], value: int) -> Counter:
    """Per group, ``(group..., how many distinct non-NULL values it holds)``, as ``{row: 1}``."""
    return {
        g + (sum(1 for v in vals if v is not None),): 1
        for g, vals in _group_values(z, group, value).items()
    }


def select_distinct(z: Counter) -> Counter:
    """Every row of positive weight, once."""
    return {r: 1 for r, w in z.items() if w > 0}
